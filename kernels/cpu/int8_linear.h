// Int8Linear: y = act(x · Wᵀ + b) for an int8 PackedMatrix, computed in integers (as llama.cpp's
// Q8_0 × Q8_0), with an AVX2 path for every host and an AVX-512 VNNI path chosen at run time.
//
// Definition (what every path computes, bit for bit):
//   1. Each row of x is quantized per block of PackedMatrix::kInt8Block inputs
//      (QuantizeActivations): a_scale = max|x| / 127, q_a = round-to-nearest-even(x / a_scale).
//   2. Per (row, output, block): isum = Σ q_w · q_a over the block's 32 inputs, exact in int32
//      (|isum| <= 32 · 127 · 127).
//   3. acc = fma(float(isum), w_scale · a_scale, acc) over the blocks in order from acc = 0
//      (fp32; float(isum) is exact), then bias, activation and store/accumulate
//      (linear_epilogue.h).
// The quantization is one AVX2 routine shared by all paths, the integer sums are exact on every
// path, and step 3 is the same fp32 operations in the same order per output on 8 or 16 lanes, so
// the paths agree bitwise. Each output depends only on its own row, so results are bitwise
// independent of the batch's other rows, the row's index and the thread count.
#ifndef LINSERVE_KERNELS_CPU_INT8_LINEAR_H_
#define LINSERVE_KERNELS_CPU_INT8_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/packed_matrix.h"

namespace linserve::cpu {

// Quantizes `rows` rows of x (row stride ldx) of `in_features` values, per block of
// kInt8Block, into blocks = ceil(in_features / kInt8Block) blocks per row; block b of row r is at
// index i = r · blocks + b:
//   scales[i] = max|x| / 127 over the block (fp32 division);
//   q[32 i + j] = round-to-nearest-even(x / scales[i]) (fp32 division), clamped to [-127, 127]
//     (the clamp only matters when the scale underflowed to a subnormal); 0 when the scale is 0
//     (an all-zero block) and past in_features;
//   sums[i] = Σ_j q[32 i + j].
// A NaN or infinite x makes its block's scale NaN or infinite, so the outputs it reaches are not
// finite (as in fp32).
void QuantizeActivations(const float* x, int64_t rows, int64_t ldx, int64_t in_features,
                         int8_t* q, float* scales, int32_t* sums);

// Linear (packed_linear.h) for w.format() == kInt8 on the given path, which this CPU must
// support (CpuSupports). Linear calls it with ChosenCpuIsa(); tests name each path.
void Int8Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w,
                const float* bias, Activation act, LinearOutput output, float* y, int64_t ldy,
                int num_threads, CpuIsa isa);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_INT8_LINEAR_H_
