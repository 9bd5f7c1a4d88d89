// Linear layers y = act(x · Wᵀ + b) over a PackedMatrix (packed_matrix.h) in any of its weight
// formats, on the path ChosenCpuIsa() picks (cpu_isa.h: AVX2 + FMA, or AVX-512 where the CPU has
// it; bitwise the same results). int8 goes to Int8Linear (int8_linear.h).
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
// fp32/bf16/fp16: every output element is computed by the same instruction sequence — a
// sequential fused multiply-add over k from zero of x[k] and the fp32 weight (for bf16/fp16 the
// stored weight widened to fp32 in registers: exactly PackedMatrix::Dequantize's value), then
// bias, activation, accumulation — whatever `rows`, the row's index and the thread count, so
// results are bitwise independent of batch composition, and a Linear over a packed matrix is
// bitwise the fp32 Linear over its dequantized weights. int8: see Int8Linear, which keeps the
// same batch independence and is bitwise identical on every CpuIsa path.
void Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, const float* bias,
            Activation act, LinearOutput output, float* y, int64_t ldy, int num_threads);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_
