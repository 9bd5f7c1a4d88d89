// The elementwise kernels are written so that the compiler or libmvec vectorises every loop,
// and so that a row's result depends only on that row: no cross-row reductions, no
// thread-count-dependent order. That is what makes a session's logits identical whether it is
// decoded alone or in a batch. Reductions (LayerNorm statistics, ‖x‖², max) run in a fixed
// order per row; LayerNorm's in double because its inputs are the residual stream, whose
// magnitude grows with depth.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd_math.h"

namespace linserve::cpu {

void ApplyActivation(Activation act, float* x, int64_t n) {
  switch (act) {
    case Activation::kNone:
      return;
    case Activation::kGelu:
      simd::MapInPlace(x, n, simd::Gelu);
      return;
    case Activation::kGeluTanh:
      simd::MapInPlace(x, n, simd::GeluTanh);
      return;
    case Activation::kRelu:
      simd::MapInPlace(x, n, simd::Relu);
      return;
    case Activation::kSilu:
      simd::MapInPlace(x, n, simd::Silu);
      return;
    case Activation::kSigmoid:
      simd::MapInPlace(x, n, simd::Sigmoid);
      return;
  }
}

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta,
               float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(dim);
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < dim; ++i) {
      const double d = xr[i] - mean;
      sq += d * d;
    }
    const double var = sq / static_cast<double>(dim);
    const float meanf = static_cast<float>(mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - meanf) * rstd * gamma[i] + beta[i];
  }
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double ms = sq / static_cast<double>(dim);
    const float rstd = static_cast<float>(1.0 / std::sqrt(ms + static_cast<double>(eps)));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * rstd * gamma[i];
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

void GatedProduct(Activation act, const float* a, int64_t rows, int64_t width, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* value = a + r * 2 * width;
    float* yr = y + r * width;
    std::copy(value + width, value + 2 * width, yr);
    ApplyActivation(act, yr, width);
    for (int64_t i = 0; i < width; ++i) yr[i] *= value[i];
  }
}

void TaylorFeatureMap(const float* x, int64_t vectors, int dim, float* out) {
  const float linear = static_cast<float>(1.0 / std::pow(static_cast<double>(dim), 0.25));
  const float quadratic = static_cast<float>(1.0 / (std::sqrt(2.0) * std::sqrt(dim)));
  const int64_t features = 1 + dim + int64_t{dim} * dim;
  for (int64_t v = 0; v < vectors; ++v) {
    const float* xv = x + v * dim;
    float* o = out + v * features;
    o[0] = 1.0f;
    for (int i = 0; i < dim; ++i) o[1 + i] = xv[i] * linear;
    float* q = o + 1 + dim;
    for (int i = 0; i < dim; ++i) {
      const float xi = xv[i] * quadratic;
      for (int j = 0; j < dim; ++j) q[i * dim + j] = xi * xv[j];
    }
  }
}

namespace {

__m256 EluPlusOne(__m256 v) {
  // x > 0 ? x + 1 : exp(x); exp of the whole vector is cheaper than a branch per lane.
  const __m256 positive = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 e = simd::Exp(_mm256_min_ps(v, _mm256_setzero_ps()));
  return _mm256_blendv_ps(e, _mm256_add_ps(v, _mm256_set1_ps(1.0f)), positive);
}

// out[v][j] = Σ_i x[v][i]·w[j][i] for `vectors` rows of x (head_dim floats each) and the
// feature_dim rows of w. Our own loop rather than a BLAS call: OpenBLAS picks its kernel at run
// time by CPU model and by the row count (on AVX-512 hosts its small-matrix kernels sum in
// another order), which made a session's φ(q), and so its logits, depend on the batch it was
// decoded in. Here every element is one fixed sequence: eight-lane FMA chains over the
// multiple-of-8 part of i, a fixed pairwise reduction of the lanes, then the tail in order.
void ProjectFixedOrder(const float* x, int64_t vectors, int head_dim, const float* w,
                       int feature_dim, float* out) {
  const int body = head_dim / 8 * 8;
  for (int64_t v = 0; v < vectors; ++v) {
    const float* xv = x + v * head_dim;
    float* ov = out + v * feature_dim;
    for (int j = 0; j < feature_dim; ++j) {
      const float* wj = w + static_cast<int64_t>(j) * head_dim;
      __m256 acc = _mm256_setzero_ps();
      for (int i = 0; i < body; i += 8) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(xv + i), _mm256_loadu_ps(wj + i), acc);
      }
      const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
      const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
      float sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
      for (int i = body; i < head_dim; ++i) sum = std::fma(xv[i], wj[i], sum);
      ov[j] = sum;
    }
  }
}

// out = exp(out − shift) for n floats.
void ExpShifted(float* out, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  simd::MapInPlace(out, n, [s](__m256 v) { return simd::Exp(_mm256_sub_ps(v, s)); });
}

}  // namespace

void ApplyFeatureMap(FeatureMap map, const float* x, int64_t vectors, int head_dim,
                     const float* favor_projection, int feature_dim, float* out) {
  const int64_t n = vectors * head_dim;
  switch (map) {
    case FeatureMap::kEluPlusOne:
      std::copy(x, x + n, out);
      simd::MapInPlace(out, n, EluPlusOne);
      return;
    case FeatureMap::kRelu:
      std::copy(x, x + n, out);
      simd::MapInPlace(out, n, simd::Relu);
      return;
    case FeatureMap::kExp:
      std::copy(x, x + n, out);
      for (int64_t v = 0; v < vectors; ++v) {
        float* o = out + v * head_dim;
        float m = -std::numeric_limits<float>::infinity();
        for (int i = 0; i < head_dim; ++i) m = std::max(m, o[i]);
        ExpShifted(o, head_dim, m);
      }
      return;
    case FeatureMap::kFavorPlus: {
      // out = x · Wᵀ, then exp(out − ‖x‖²/2) / √m per vector.
      ProjectFixedOrder(x, vectors, head_dim, favor_projection, feature_dim, out);
      const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(static_cast<float>(feature_dim)));
      for (int64_t v = 0; v < vectors; ++v) {
        const float* xv = x + v * head_dim;
        float sq = 0.0f;
        for (int i = 0; i < head_dim; ++i) sq += xv[i] * xv[i];
        const __m256 half_sq = _mm256_set1_ps(0.5f * sq);
        simd::MapInPlace(out + v * feature_dim, feature_dim, [half_sq, scale](__m256 w) {
          return _mm256_mul_ps(simd::Exp(_mm256_sub_ps(w, half_sq)), scale);
        });
      }
      return;
    }
  }
}

std::vector<double> SinusoidalDenominators(int64_t dim) {
  std::vector<double> d(static_cast<size_t>(dim));
  for (int64_t j = 0; j < dim; ++j) {
    d[static_cast<size_t>(j)] =
        std::pow(10000.0, 2.0 * static_cast<double>(j / 2) / static_cast<double>(dim));
  }
  return d;
}

void AddSinusoidalPosition(int64_t position, const std::vector<double>& denominators, float* x) {
  const double p = static_cast<double>(position);
  const size_t dim = denominators.size();
  for (size_t j = 0; j < dim; ++j) {
    const double angle = p / denominators[j];
    x[j] += static_cast<float>((j % 2 == 0) ? std::sin(angle) : std::cos(angle));
  }
}

}  // namespace linserve::cpu
