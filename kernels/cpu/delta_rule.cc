#include "kernels/cpu/delta_rule.h"

#include <cmath>

#include "kernels/cpu/blas.h"

namespace linserve::cpu {

void L2Normalize(float* x, int64_t n, float eps, float scale) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float factor = scale / std::sqrt(sum + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void GatedDeltaRuleStep(const float* q, const float* k, const float* v, float decay, float beta,
                        int64_t k_dim, int64_t v_dim, float* s, float* o, float* scratch) {
  // scratch: Sᵀk of the decayed S, then u.
  float* u = scratch;
  for (int64_t j = 0; j < v_dim; ++j) u[j] = 0.0f;
  for (int64_t i = 0; i < k_dim; ++i) {
    float* row = s + i * v_dim;
    const float ki = k[i];
    for (int64_t j = 0; j < v_dim; ++j) {
      row[j] *= decay;
      u[j] += row[j] * ki;
    }
  }
  for (int64_t j = 0; j < v_dim; ++j) u[j] = beta * (v[j] - u[j]);
  for (int64_t j = 0; j < v_dim; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < k_dim; ++i) {
    float* row = s + i * v_dim;
    const float ki = k[i];
    const float qi = q[i];
    for (int64_t j = 0; j < v_dim; ++j) {
      row[j] += ki * u[j];
      o[j] += row[j] * qi;
    }
  }
}

int64_t GatedDeltaRuleChunkScratchFloats(int chunk, int64_t k_dim, int64_t v_dim) {
  const int64_t n = chunk;
  // b; the n × n products; W | U; Q ⊙ exp(b) (then K ⊙ exp(b_last − b)); the step's v_dim.
  return n + n * n + n * (k_dim + v_dim) + n * k_dim + v_dim;
}

void GatedDeltaRuleChunk(int n, int64_t k_dim, int64_t v_dim, const float* q, const float* k,
                         int64_t ld_qk, const float* v, int64_t ld_v, const float* beta,
                         const float* g, float* s, float* o, int64_t ld_o, float* scratch) {
  if (n == 1) {
    GatedDeltaRuleStep(q, k, v, std::exp(g[0]), beta[0], k_dim, v_dim, s, o, scratch);
    return;
  }
  const int64_t ld_x = k_dim + v_dim;
  float* b = scratch;
  float* m = b + n;
  float* x = m + static_cast<int64_t>(n) * n;  // W | U, rows of ld_x
  float* scaled = x + n * ld_x;                // rows of k_dim
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) b[i] = sum += g[i];
  // The right-hand sides K ⊙ β exp(b) | V ⊙ β, then T applied by forward substitution with
  // L_ij = β_i (k_i · k_j) exp(b_i − b_j), j < i.
  for (int i = 0; i < n; ++i) {
    const float* ki = k + i * ld_qk;
    const float* vi = v + i * ld_v;
    float* xi = x + i * ld_x;
    const float kb = beta[i] * std::exp(b[i]);
    for (int64_t c = 0; c < k_dim; ++c) xi[c] = ki[c] * kb;
    for (int64_t c = 0; c < v_dim; ++c) xi[k_dim + c] = vi[c] * beta[i];
  }
  Gemm(Transpose::kNo, Transpose::kYes, n, n, static_cast<int>(k_dim), 1.0f, k,
       static_cast<int>(ld_qk), k, static_cast<int>(ld_qk), 0.0f, m, n);
  for (int i = 1; i < n; ++i) {
    float* xi = x + i * ld_x;
    for (int j = 0; j < i; ++j) {
      const float l = beta[i] * m[i * n + j] * std::exp(b[i] - b[j]);
      const float* xj = x + j * ld_x;
      for (int64_t c = 0; c < ld_x; ++c) xi[c] -= l * xj[c];
    }
  }
  // u = U − W S, in U's columns.
  float* u = x + k_dim;
  Gemm(Transpose::kNo, Transpose::kNo, n, static_cast<int>(v_dim), static_cast<int>(k_dim), -1.0f,
       x, static_cast<int>(ld_x), s, static_cast<int>(v_dim), 1.0f, u, static_cast<int>(ld_x));
  // o = (Q ⊙ exp(b)) S + (Q Kᵀ ⊙ Γ, causal) u.
  Gemm(Transpose::kNo, Transpose::kYes, n, n, static_cast<int>(k_dim), 1.0f, q,
       static_cast<int>(ld_qk), k, static_cast<int>(ld_qk), 0.0f, m, n);
  for (int i = 0; i < n; ++i) {
    float* mi = m + i * n;
    for (int j = 0; j <= i; ++j) mi[j] *= std::exp(b[i] - b[j]);
    for (int j = i + 1; j < n; ++j) mi[j] = 0.0f;
    const float e = std::exp(b[i]);
    const float* qi = q + i * ld_qk;
    for (int64_t c = 0; c < k_dim; ++c) scaled[i * k_dim + c] = qi[c] * e;
  }
  Gemm(Transpose::kNo, Transpose::kNo, n, static_cast<int>(v_dim), static_cast<int>(k_dim), 1.0f,
       scaled, static_cast<int>(k_dim), s, static_cast<int>(v_dim), 0.0f, o,
       static_cast<int>(ld_o));
  Gemm(Transpose::kNo, Transpose::kNo, n, static_cast<int>(v_dim), n, 1.0f, m, n, u,
       static_cast<int>(ld_x), 1.0f, o, static_cast<int>(ld_o));
  // S ← exp(b_last) S + (K ⊙ exp(b_last − b))ᵀ u.
  const float last = b[n - 1];
  const float carry = std::exp(last);
  for (int64_t c = 0; c < k_dim * v_dim; ++c) s[c] *= carry;
  for (int i = 0; i < n; ++i) {
    const float e = std::exp(last - b[i]);
    const float* ki = k + i * ld_qk;
    for (int64_t c = 0; c < k_dim; ++c) scaled[i * k_dim + c] = ki[c] * e;
  }
  Gemm(Transpose::kYes, Transpose::kNo, static_cast<int>(k_dim), static_cast<int>(v_dim), n, 1.0f,
       scaled, static_cast<int>(k_dim), u, static_cast<int>(ld_x), 1.0f, s,
       static_cast<int>(v_dim));
}

}  // namespace linserve::cpu
