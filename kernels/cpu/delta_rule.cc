#include "kernels/cpu/delta_rule.h"

#include <cmath>

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

void GatedRmsNorm(float* o, int64_t n, const float* weight, const float* gate, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += o[i] * o[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    float y = o[i] * inv * weight[i];
    if (gate != nullptr) y *= gate[i] / (1.0f + std::exp(-gate[i]));
    o[i] = y;
  }
}

}  // namespace linserve::cpu
