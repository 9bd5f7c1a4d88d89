// The epilogue every Linear kernel applies to a panel's 16 fp32 dot products of one row: bias,
// activation, then store or accumulate into y (packed_linear.h's LinearOutput). One definition,
// so every path finishes an output with the same instructions.
#ifndef LINSERVE_KERNELS_CPU_LINEAR_EPILOGUE_H_
#define LINSERVE_KERNELS_CPU_LINEAR_EPILOGUE_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/packed_matrix.h"
#include "kernels/cpu/simd_math.h"

namespace linserve::cpu::linear_internal {

inline constexpr int kWidth = PackedMatrix::kPanelWidth;

inline __m256 Activate(Activation act, __m256 v) {
  switch (act) {
    case Activation::kNone:
      return v;
    case Activation::kGelu:
      return simd::Gelu(v);
    case Activation::kGeluTanh:
      return simd::GeluTanh(v);
    case Activation::kRelu:
      return simd::Relu(v);
    case Activation::kSilu:
      return simd::Silu(v);
    case Activation::kSigmoid:
      return simd::Sigmoid(v);
  }
  return v;
}

struct Epilogue {
  const float* bias;  // this panel's 16 bias values, or null
  Activation act;
  LinearOutput output;
  int cols;  // valid columns of this panel, 1..16
};

// Finishes y[0..cols) from the row's dot products lo (columns 0–7) and hi (8–15).
inline void Finish(const Epilogue& e, __m256 lo, __m256 hi, float* y) {
  if (e.cols == kWidth) {
    if (e.bias != nullptr) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(e.bias));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(e.bias + 8));
    }
    lo = Activate(e.act, lo);
    hi = Activate(e.act, hi);
    if (e.output == LinearOutput::kAccumulate) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(y));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(y + 8));
    }
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  const __m256i mlo = simd::TailMask(std::min(e.cols, 8));
  const __m256i mhi = simd::TailMask(std::max(e.cols - 8, 0));
  if (e.bias != nullptr) {
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(e.bias, mlo));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(e.bias + 8, mhi));
  }
  lo = Activate(e.act, lo);
  hi = Activate(e.act, hi);
  if (e.output == LinearOutput::kAccumulate) {
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(y, mlo));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(y + 8, mhi));
  }
  _mm256_maskstore_ps(y, mlo, lo);
  _mm256_maskstore_ps(y + 8, mhi, hi);
}

// Finishes rows [0, n) of y (row stride ldy) from dot[16 i + c], 64-byte aligned: the sums a
// tile computed in code built for another instruction set (cpu_isa.h), so that the epilogue is
// the same instructions on every path.
inline void FinishRows(const Epilogue& e, const float* dot, int64_t n, float* y, int64_t ldy) {
  for (int64_t i = 0; i < n; ++i) {
    Finish(e, _mm256_load_ps(dot + i * kWidth), _mm256_load_ps(dot + i * kWidth + 8), y + i * ldy);
  }
}

// Panel p's epilogue.
inline Epilogue PanelEpilogue(const PackedMatrix& w, int64_t p, const float* bias,
                              Activation act, LinearOutput output) {
  const int64_t col0 = p * kWidth;
  return Epilogue{bias != nullptr ? bias + col0 : nullptr, act, output,
                  static_cast<int>(std::min<int64_t>(kWidth, w.out_features() - col0))};
}

}  // namespace linserve::cpu::linear_internal

#endif  // LINSERVE_KERNELS_CPU_LINEAR_EPILOGUE_H_
