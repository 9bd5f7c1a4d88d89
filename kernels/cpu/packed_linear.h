// Linear layers y = act(x · Wᵀ + b) over a PackedMatrix (packed_matrix.h) in any of its weight
// formats. AVX2 + FMA only (the x86-64-v3 baseline); AVX-512 / VNNI paths are not here.
#ifndef LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_
#define LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_matrix.h"

namespace linserve::cpu {

enum class LinearOutput {
  kStore,       // y = act(x · Wᵀ + b)
  kAccumulate,  // y += act(x · Wᵀ + b)   (residual connections)
};

// For each of the `rows` rows of x (row stride ldx >= in_features) writes out_features values
// to y (row stride ldy >= out_features). bias (out_features floats) may be null. x and y must
// not overlap. Parallel over output panels on up to `num_threads` threads (ParallelFor).
//
// Every output element is computed by the same instruction sequence — a sequential fused
// multiply-add over k from zero of x[k] and the fp32 weight (for bf16/fp16/int8 the stored
// weight widened to fp32 in registers, int8 times its block's scale: exactly
// PackedMatrix::Dequantize's value), then bias, activation, accumulation — whatever `rows`, the
// row's index and the thread count, so results are bitwise independent of batch composition,
// and a Linear over a packed matrix is bitwise the fp32 Linear over its dequantized weights.
void Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, const float* bias,
            Activation act, LinearOutput output, float* y, int64_t ldy, int num_threads);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_
