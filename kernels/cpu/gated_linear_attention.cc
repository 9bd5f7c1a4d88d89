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

}  // namespace

void GatedLinearAttentionStep(const float* q, const float* k, const float* v, const float* gk,
                              int64_t k_dim, int64_t v_dim, float* s, float* o) {
  for (int64_t j = 0; j < v_dim; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < k_dim; ++i) {
    float* row = s + i * v_dim;
    const float alpha = std::exp(gk[i]);
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
  // b; q scaled; k scaled; A; one row of the within-block products.
  return 3 * n * k_dim + n * n + k_dim;
}

void GatedLinearAttentionChunk(int n, int64_t k_dim, int64_t v_dim, const float* q, const float* k,
                               int64_t ld_qk, const float* v, int64_t ld_v, const float* gk,
                               int64_t ld_g, float* s, float* o, int64_t ld_o, float* scratch) {
  if (n == 1) {
    GatedLinearAttentionStep(q, k, v, gk, k_dim, v_dim, s, o);
    return;
  }
  const int kd = static_cast<int>(k_dim);
  const int vd = static_cast<int>(v_dim);
  float* b = scratch;                             // [n, k_dim]: cumulative log gates
  float* qs = b + n * k_dim;                      // [n, k_dim]: q scaled
  float* ks = qs + n * k_dim;                     // [n, k_dim]: k scaled
  float* a = ks + n * k_dim;                      // [n, n]: A, zero above the diagonal
  float* pair = a + static_cast<int64_t>(n) * n;  // [k_dim]
  for (int i = 0; i < n; ++i) {
    const float* prev = i == 0 ? nullptr : b + (i - 1) * k_dim;
    const float* gi = gk + i * ld_g;
    float* bi = b + i * k_dim;
    for (int64_t c = 0; c < k_dim; ++c) bi[c] = (prev != nullptr ? prev[c] : 0.0f) + gi[c];
  }
  // o = (Q ⊙ exp(b)) S.
  for (int i = 0; i < n; ++i) {
    ScaleByExpOfDifference(q + i * ld_qk, b + i * k_dim, nullptr, k_dim, qs + i * k_dim);
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
  // S ← diag(exp(b_last)) S + (K ⊙ exp(b_last − b))ᵀ V.
  const float* last = b + (n - 1) * k_dim;
  for (int64_t c = 0; c < k_dim; ++c) pair[c] = last[c];
  simd::MapInPlace(pair, k_dim, [](__m256 e) { return simd::Exp(e); });
  for (int64_t c = 0; c < k_dim; ++c) {
    float* row = s + c * v_dim;
    for (int64_t j = 0; j < v_dim; ++j) row[j] *= pair[c];
  }
  for (int j = 0; j < n; ++j) {
    ScaleByExpOfDifference(k + j * ld_qk, last, b + j * k_dim, k_dim, ks + j * k_dim);
  }
  Gemm(Transpose::kYes, Transpose::kNo, kd, vd, n, 1.0f, ks, kd, v, static_cast<int>(ld_v), 1.0f, s,
       vd);
}

}  // namespace linserve::cpu
