// Linear layers of a few rows, without cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ (+ y), the layout
// and fp32 accumulation of Gemm::Linear (gemm.h), for bf16/fp16 inputs and m ≤ 4 rows.
//
// Why: a decode step at batch 1–4 is ~4 GEMMs per layer whose cost is reading the weights once,
// yet cuBLASLt's kernels for these shapes took about 5 µs each on an H200 (split-K for the wide
// ones, plus a reduction kernel), 294 of a batch-1 step's 547 µs against a 58 µs floor
// (bench/results/gpu.md). Here one warp computes one output column for all rows: it streams
// that weight row once in 16-byte loads (8 elements), multiplies each piece by the same piece of
// every input row (read from L1/L2: the inputs are a few KB), and reduces across the warp.
// Measured on the H200 against cuBLASLt (bench/results/gpu.md, "After the first fixes"):
// the decode step ran 1.12–1.27× faster at 1–4 rows but 0.95× at 8, where each weight piece needs
// 8 input loads from L1; hence the limit of 4. Its fused form also finishes an MLP's first layer
// (bias, activation or gate, the hidden rows in the weights' type), or a projection into the
// residual stream with the add + norm after it, which saves the elementwise kernel's launch and
// the norms' per layer at these batches.
#ifndef LINSERVE_KERNELS_CUDA_SMALL_BATCH_LINEAR_H_
#define LINSERVE_KERNELS_CUDA_SMALL_BATCH_LINEAR_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {

// Most rows the kernel takes; more go to cuBLASLt, whose tiles then pay off.
inline constexpr int64_t kSmallBatchLinearMaxRows = 4;
// The kernel's input width k is a multiple of this (its 16-byte loads of 8 elements).
inline constexpr int64_t kSmallBatchLinearKMultiple = 8;

// Whether LaunchSmallBatchLinear takes these operands: a 16-bit element type, 1 ≤ m ≤
// kSmallBatchLinearMaxRows, k a multiple of kSmallBatchLinearKMultiple, and x and w 16-byte
// aligned (so that every row of both is).
bool SmallBatchLinearApplies(DType dtype, const void* x, const void* w, int64_t m, int64_t k);

// y = x · wᵀ (accumulate: y += x · wᵀ), dense row-major x [m, k], w [n, k], y fp32 [m, n]; the
// operands must satisfy SmallBatchLinearApplies.
absl::Status LaunchSmallBatchLinear(cudaStream_t stream, DType dtype, const void* x,
                                    const void* w, float* y, int64_t m, int64_t n, int64_t k,
                                    bool accumulate);

// The same product followed by an MLP's bias and activation or gate (elementwise.h's
// ActivationEpilogue), in the one launch: hidden T [m, cols], w [cols, k] ([2·cols, k] with a
// gate), bitwise what LaunchSmallBatchLinear then LaunchBiasActivation / LaunchBiasGate write.
// The operands must satisfy SmallBatchLinearApplies.
absl::Status LaunchSmallBatchLinearActivation(cudaStream_t stream, DType dtype, const void* x,
                                              const void* w, int64_t m, int64_t cols, int64_t k,
                                              const ActivationEpilogue& epilogue, void* hidden);

// The product y = x · wᵀ (fp32 [m, n], stored) followed by the residual add + norm `then` over
// it (then.delta == y, then.rows == m, then.d == n, then.dtype == dtype), in the one launch:
// the block that finishes last runs the add + norm (add_norm.cuh), so the rows are bitwise what
// LaunchSmallBatchLinear then LaunchAddNorm write. `arrivals`: one device counter, zero before
// the launch and left zero after it; launches sharing it must not overlap.
absl::Status LaunchSmallBatchLinearAddNorm(cudaStream_t stream, DType dtype, const void* x,
                                           const void* w, float* y, int64_t m, int64_t n, int64_t k,
                                           const AddNormArgs& then, unsigned* arrivals);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_SMALL_BATCH_LINEAR_H_
