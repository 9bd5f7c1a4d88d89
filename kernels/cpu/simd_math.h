// Eight-lane AVX2 math shared by the elementwise kernels and the epilogue of Linear. erf, tanh
// and exp come from glibc's libmvec (the vector variants GCC itself calls under -ffast-math,
// ≤ 4 ulp); calling them directly keeps the rest of our code free of -ffast-math. Every element
// of an array, including the ragged tail, goes through the same vector function, so a value's
// result never depends on where in a buffer (or in which batch row) it sits.
#ifndef LINSERVE_KERNELS_CPU_SIMD_MATH_H_
#define LINSERVE_KERNELS_CPU_SIMD_MATH_H_

#include <immintrin.h>

#include <cstdint>

extern "C" {
__m256 _ZGVdN8v_erff(__m256 x);
__m256 _ZGVdN8v_tanhf(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);
}

namespace linserve::cpu::simd {

inline __m256 Exp(__m256 x) { return _ZGVdN8v_expf(x); }

// 0.5 · x · (1 + erf(x / √2))
inline __m256 Gelu(__m256 x) {
  const __m256 e = _ZGVdN8v_erff(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))
inline __m256 GeluTanh(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 inner = _mm256_mul_ps(
      _mm256_set1_ps(0.79788456080286536f),
      _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), x3)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.0f), _ZGVdN8v_tanhf(inner)));
}

inline __m256 Relu(__m256 x) { return _mm256_max_ps(x, _mm256_setzero_ps()); }

// 1 / (1 + exp(−x))
inline __m256 Sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// x · sigmoid(x)
inline __m256 Silu(__m256 x) { return _mm256_mul_ps(x, Sigmoid(x)); }

// Lane mask selecting the first `count` (0..8) lanes, for _mm256_maskload/maskstore.
inline __m256i TailMask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count)), lanes);
}

// x[i] = f(x[i]) for i in [0, n), eight lanes at a time with a masked tail.
template <class F>
inline void MapInPlace(float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(x + i, mask, f(_mm256_maskload_ps(x + i, mask)));
  }
}

}  // namespace linserve::cpu::simd

#endif  // LINSERVE_KERNELS_CPU_SIMD_MATH_H_
