#include "kernels/cpu/gated_linear_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/simd_math.h"

namespace linserve::cpu {
namespace {

// Tokens of one block of A (see the header).
constexpr int kBlock = 16;

// out[c] = x[c] · exp(a[c] − b[c]) over n values, b null: 0 (every exponent here is ≤ 0).
void ScaleByExpOfDifference(const float* x, const float* a, const float* b, int64_t n, float* out) {
  for (int64_t c = 0; c < n; ++c) out[c] = b != nullptr ? a[c] - b[c] : a[c];
  simd::MapInPlace(out, n, [](__m256 e) { return simd::Exp(e); });
  for (int64_t c = 0; c < n; ++c) out[c] *= x[c];
}

// out ← R_m x over k_dim channels (out must not overlap x).
void Turn(const Rotation& r, int m, const float* x, int64_t k_dim, float* out) {
  const int64_t half = k_dim / 2;
  const float* cos = r.cos.data() + (m + Rotation::kMaxTurns) * half;
  const float* sin = r.sin.data() + (m + Rotation::kMaxTurns) * half;
  for (int64_t c = 0; c < half; ++c) {
    out[c] = x[c] * cos[c] - x[c + half] * sin[c];
    out[c + half] = x[c + half] * cos[c] + x[c] * sin[c];
  }
}

// S ← R_m S in place (its rows' pairs).
void TurnRows(const Rotation& r, int m, int64_t k_dim, int64_t v_dim, float* s) {
  const int64_t half = k_dim / 2;
  const float* cos = r.cos.data() + (m + Rotation::kMaxTurns) * half;
  const float* sin = r.sin.data() + (m + Rotation::kMaxTurns) * half;
  for (int64_t c = 0; c < half; ++c) {
    float* a = s + c * v_dim;
    float* b = s + (c + half) * v_dim;
    for (int64_t j = 0; j < v_dim; ++j) {
      const float x1 = a[j], x2 = b[j];
      a[j] = x1 * cos[c] - x2 * sin[c];
      b[j] = x2 * cos[c] + x1 * sin[c];
    }
  }
}

// The chunk with one gate for every channel (g_step 0, no rotation: Mamba-2), where the pairs'
// decays factor out of the scores: with b = cumsum(g), A = (Q Kᵀ) ⊙ exp(b_i − b_j) below the
// diagonal, o = (Q ⊙ exp(b)) S + A V, S ← exp(b_last) S + (K ⊙ exp(b_last − b))ᵀ V — three GEMMs
// and n² + 3n exps instead of the per-channel form's.
void ScalarGateChunk(int n, int64_t k_dim, int64_t v_dim, const float* q, const float* k,
                     int64_t ld_qk, const float* v, int64_t ld_v, const float* g, int64_t ld_g,
                     float* s, float* o, int64_t ld_o, float* scratch) {
  const int kd = static_cast<int>(k_dim);
  const int vd = static_cast<int>(v_dim);
  float* b = scratch;             // [n]
  float* scaled = b + n;          // [n, k_dim]: q ⊙ exp(b), then k ⊙ exp(b_last − b)
  float* a = scaled + n * k_dim;  // [n, n]
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) b[i] = sum += g[i * ld_g];
  for (int i = 0; i < n; ++i) {
    const float e = std::exp(b[i]);
    for (int64_t c = 0; c < k_dim; ++c) scaled[i * k_dim + c] = q[i * ld_qk + c] * e;
  }
  Gemm(Transpose::kNo, Transpose::kNo, n, vd, kd, 1.0f, scaled, kd, s, vd, 0.0f, o,
       static_cast<int>(ld_o));
  Gemm(Transpose::kNo, Transpose::kYes, n, n, kd, 1.0f, q, static_cast<int>(ld_qk), k,
       static_cast<int>(ld_qk), 0.0f, a, n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) a[i * n + j] *= std::exp(b[i] - b[j]);
    for (int j = i + 1; j < n; ++j) a[i * n + j] = 0.0f;
  }
  Gemm(Transpose::kNo, Transpose::kNo, n, vd, n, 1.0f, a, n, v, static_cast<int>(ld_v), 1.0f, o,
       static_cast<int>(ld_o));
  const float last = b[n - 1];
  const float carry = std::exp(last);
  for (int64_t c = 0; c < k_dim * v_dim; ++c) s[c] *= carry;
  for (int i = 0; i < n; ++i) {
    const float e = std::exp(last - b[i]);
    for (int64_t c = 0; c < k_dim; ++c) scaled[i * k_dim + c] = k[i * ld_qk + c] * e;
  }
  Gemm(Transpose::kYes, Transpose::kNo, kd, vd, n, 1.0f, scaled, kd, v, static_cast<int>(ld_v),
       1.0f, s, vd);
}

}  // namespace

Rotation RotationTable(int64_t k_dim, double base) {
  const int64_t half = k_dim / 2;
  Rotation r;
  r.cos.resize(static_cast<size_t>((2 * Rotation::kMaxTurns + 1) * half));
  r.sin.resize(r.cos.size());
  for (int m = -Rotation::kMaxTurns; m <= Rotation::kMaxTurns; ++m) {
    for (int64_t c = 0; c < half; ++c) {
      const double angle = m * std::pow(base, -2.0 * static_cast<double>(c) / k_dim);
      const size_t at = static_cast<size_t>((m + Rotation::kMaxTurns) * half + c);
      r.cos[at] = static_cast<float>(std::cos(angle));
      r.sin[at] = static_cast<float>(std::sin(angle));
    }
  }
  return r;
}

void GatedLinearAttentionStep(const float* q, const float* k, const float* v, const float* gk,
                              int64_t g_step, const Rotation* rotation, int64_t k_dim,
                              int64_t v_dim, float* s, float* o) {
  for (int64_t j = 0; j < v_dim; ++j) o[j] = 0.0f;
  if (rotation != nullptr) {
    // Pairs (c, c + half) turned by −θ_c, then decayed and updated, in the CUDA step's order.
    const int64_t half = k_dim / 2;
    const float* cos = rotation->cos.data() + (Rotation::kMaxTurns - 1) * half;
    const float* sin = rotation->sin.data() + (Rotation::kMaxTurns - 1) * half;
    for (int64_t c = 0; c < half; ++c) {
      float* a = s + c * v_dim;
      float* b = s + (c + half) * v_dim;
      const float alpha1 = std::exp(gk[c * g_step]);
      const float alpha2 = std::exp(gk[(c + half) * g_step]);
      for (int64_t j = 0; j < v_dim; ++j) {
        const float x1 = a[j], x2 = b[j];
        a[j] = (x1 * cos[c] - x2 * sin[c]) * alpha1 + k[c] * v[j];
        b[j] = (x2 * cos[c] + x1 * sin[c]) * alpha2 + k[c + half] * v[j];
        o[j] += a[j] * q[c] + b[j] * q[c + half];
      }
    }
    return;
  }
  for (int64_t i = 0; i < k_dim; ++i) {
    float* row = s + i * v_dim;
    const float alpha = std::exp(gk[i * g_step]);
    const float ki = k[i];
    const float qi = q[i];
    for (int64_t j = 0; j < v_dim; ++j) {
      row[j] = row[j] * alpha + ki * v[j];
      o[j] += row[j] * qi;
    }
  }
}

int64_t GatedLinearAttentionChunkScratchFloats(int chunk, int64_t k_dim) {
  const int64_t n = chunk;
  // b; q scaled; k scaled; A; q and k turned (with the rotation); one row of the within-block
  // products and one turned vector.
  return 5 * n * k_dim + n * n + 2 * k_dim;
}

void GatedLinearAttentionChunk(int n, int64_t k_dim, int64_t v_dim, const float* q_in,
                               const float* k_in, int64_t ld_in, const float* v, int64_t ld_v,
                               const float* gk, int64_t ld_g, int64_t g_step,
                               const Rotation* rotation, float* s, float* o, int64_t ld_o,
                               float* scratch) {
  if (n == 1) {
    GatedLinearAttentionStep(q_in, k_in, v, gk, g_step, rotation, k_dim, v_dim, s, o);
    return;
  }
  if (g_step == 0 && rotation == nullptr) {
    ScalarGateChunk(n, k_dim, v_dim, q_in, k_in, ld_in, v, ld_v, gk, ld_g, s, o, ld_o, scratch);
    return;
  }
  const int kd = static_cast<int>(k_dim);
  const int vd = static_cast<int>(v_dim);
  float* b = scratch;                             // [n, k_dim]: cumulative log gates
  float* qs = b + n * k_dim;                      // [n, k_dim]: q scaled
  float* ks = qs + n * k_dim;                     // [n, k_dim]: k scaled
  float* a = ks + n * k_dim;                      // [n, n]: A, zero above the diagonal
  float* turned_q = a + static_cast<int64_t>(n) * n;  // [n, k_dim]: R_i q_i (with the rotation)
  float* turned_k = turned_q + n * k_dim;             // [n, k_dim]: R_j k_j
  float* pair = turned_k + n * k_dim;                 // [k_dim]
  float* turned = pair + k_dim;                       // [k_dim]
  // The scores' q and k: as given, or turned by their place in the chunk.
  const float* q = q_in;
  const float* k = k_in;
  int64_t ld_qk = ld_in;
  if (rotation != nullptr) {
    for (int i = 0; i < n; ++i) {
      Turn(*rotation, i, q_in + i * ld_in, k_dim, turned_q + i * k_dim);
      Turn(*rotation, i, k_in + i * ld_in, k_dim, turned_k + i * k_dim);
    }
    q = turned_q;
    k = turned_k;
    ld_qk = k_dim;
  }
  for (int i = 0; i < n; ++i) {
    const float* prev = i == 0 ? nullptr : b + (i - 1) * k_dim;
    const float* gi = gk + i * ld_g;
    float* bi = b + i * k_dim;
    for (int64_t c = 0; c < k_dim; ++c) bi[c] = (prev != nullptr ? prev[c] : 0.0f) + gi[c * g_step];
  }
  // o = (Q ⊙ exp(b)) S, each q_i turned by i + 1 with the rotation.
  for (int i = 0; i < n; ++i) {
    const float* qi = q_in + i * ld_in;
    if (rotation != nullptr) {
      Turn(*rotation, i + 1, qi, k_dim, turned);
      qi = turned;
    }
    ScaleByExpOfDifference(qi, b + i * k_dim, nullptr, k_dim, qs + i * k_dim);
  }
  Gemm(Transpose::kNo, Transpose::kNo, n, vd, kd, 1.0f, qs, kd, s, vd, 0.0f, o,
       static_cast<int>(ld_o));
  // A, block by block.
  std::fill_n(a, static_cast<int64_t>(n) * n, 0.0f);
  for (int r = 0; r < n; r += kBlock) {
    const int end = std::min(n, r + kBlock);
    const float* br = b + r * k_dim;
    if (r > 0) {
      for (int i = r; i < end; ++i) {
        ScaleByExpOfDifference(q + i * ld_qk, b + i * k_dim, br, k_dim, qs + i * k_dim);
      }
      for (int j = 0; j < r; ++j) {
        ScaleByExpOfDifference(k + j * ld_qk, br, b + j * k_dim, k_dim, ks + j * k_dim);
      }
      Gemm(Transpose::kNo, Transpose::kYes, end - r, r, kd, 1.0f, qs + r * k_dim, kd, ks, kd, 0.0f,
           a + r * n, n);
    }
    for (int i = r; i < end; ++i) {
      const float* qi = q + i * ld_qk;
      for (int j = r; j <= i; ++j) {
        ScaleByExpOfDifference(k + j * ld_qk, b + i * k_dim, b + j * k_dim, k_dim, pair);
        float dot = 0.0f;
        for (int64_t c = 0; c < k_dim; ++c) dot += qi[c] * pair[c];
        a[i * n + j] = dot;
      }
    }
  }
  // o += A V.
  Gemm(Transpose::kNo, Transpose::kNo, n, vd, n, 1.0f, a, n, v, static_cast<int>(ld_v), 1.0f, o,
       static_cast<int>(ld_o));
  // S ← diag(exp(b_last)) R_−n S + (R_−(n−1) K ⊙ exp(b_last − b))ᵀ V (no turns without the
  // rotation).
  if (rotation != nullptr) TurnRows(*rotation, -n, k_dim, v_dim, s);
  const float* last = b + (n - 1) * k_dim;
  for (int64_t c = 0; c < k_dim; ++c) pair[c] = last[c];
  simd::MapInPlace(pair, k_dim, [](__m256 e) { return simd::Exp(e); });
  for (int64_t c = 0; c < k_dim; ++c) {
    float* row = s + c * v_dim;
    for (int64_t j = 0; j < v_dim; ++j) row[j] *= pair[c];
  }
  for (int j = 0; j < n; ++j) {
    const float* kj = k + j * ld_qk;
    if (rotation != nullptr) {
      Turn(*rotation, -(n - 1), kj, k_dim, turned);
      kj = turned;
    }
    ScaleByExpOfDifference(kj, last, b + j * k_dim, k_dim, ks + j * k_dim);
  }
  Gemm(Transpose::kYes, Transpose::kNo, kd, vd, n, 1.0f, ks, kd, v, static_cast<int>(ld_v), 1.0f, s,
       vd);
}

}  // namespace linserve::cpu
