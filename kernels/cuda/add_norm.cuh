// Residual add + norm (LayerNorm or RMSNorm) of one row by a whole block, in device code: the body
// of AddNormKernel (add_norm.cu, one block per row), of the small-batch linear layer's fused
// tail (small_batch_linear.cu), which runs it in the block that finishes last, and of the
// embedding's first pre-norm (embedding.cu). All run it with kAddNormThreads threads and visit
// each thread's columns in the same order, so their rows are bitwise the same.
//
// r = x + delta + bias is formed, optionally
// stored as the new residual, and normalised: the statistics (LayerNorm: the mean, then the
// two-pass variance; RMSNorm: the mean of the squares) are accumulated in double with the
// fixed-order BlockSum, as the CPU kernels do (the residual stream grows with depth), so results
// are reproducible and match the CPU backend to rounding. Rows up to kAddNormThreads ·
// kAddNormMaxCached wide may be held in registers (a row's passes then wait for memory once: the
// statistics' dependent passes made the kernel ~5 µs a row on an H200, bench/results/gpu.md);
// wider rows (d_model may be 65536) are not staged in shared memory: their later passes re-read r
// from L1/L2, which holds a row comfortably. In place is safe: each thread reads and writes only
// its own columns, and all reads of the statistics passes finish (barriers inside BlockSum)
// before the output pass writes.
#ifndef LINSERVE_KERNELS_CUDA_ADD_NORM_CUH_
#define LINSERVE_KERNELS_CUDA_ADD_NORM_CUH_

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {

inline constexpr int kAddNormThreads = 256;
// Rows of up to kAddNormThreads · kAddNormMaxCached values may be held in registers.
inline constexpr int kAddNormMaxCached = 16;

// Every thread of a block of kAddNormThreads must call this (it contains barriers). `scratch`: 32
// shared doubles. kCached > 0: each thread holds its kCached values of the row (columns
// threadIdx.x + t · blockDim.x) and their gamma/beta in registers, read once before the first
// reduction, so the later passes wait for no memory; d ≤ kCached · blockDim.x. kCached == 0: any
// d, the later passes re-reading r from L1/L2. Both visit a thread's columns in the same order,
// and so does every kCached large enough, so they give the same bits. `Delta`: how delta is read
// (a volatile pointer where other blocks of the same kernel wrote it).
template <typename T, NormType kNorm, int kCached, typename Delta = const float*>
__device__ __forceinline__ void AddNormRow(const AddNormArgs& args, int64_t row, double* scratch) {
  const int d = args.d;
  const int64_t offset = row * d;
  const float* x = args.x + offset;
  const Delta delta = args.delta == nullptr ? nullptr : static_cast<Delta>(args.delta) + offset;
  float* sum_out = args.sum_out == nullptr ? nullptr : args.sum_out + offset;

  // x + (delta + bias), the order in which the CPU backend's Linear accumulates a projection
  // with its bias into the residual stream.
  auto residual = [&](int c) {
    if (delta == nullptr) return x[c];
    float update = delta[c];
    if (args.delta_bias != nullptr) update = __fadd_rn(update, args.delta_bias[c]);
    return __fadd_rn(x[c], update);
  };
  constexpr int kSlots = kCached > 0 ? kCached : 1;
  float r_cached[kSlots] = {}, gamma_cached[kSlots] = {}, beta_cached[kSlots] = {};

  // LayerNorm: Σ r; RMSNorm: Σ r² (the product in double, as the CPU kernel forms it).
  double local = 0.0;
  auto add = [&](float r) {
    local += kNorm == NormType::kLayerNorm ? static_cast<double>(r)
                                           : static_cast<double>(r) * static_cast<double>(r);
  };
  if constexpr (kCached > 0) {
#pragma unroll
    for (int t = 0; t < kCached; ++t) {
      const int c = threadIdx.x + t * blockDim.x;
      if (c >= d) break;
      r_cached[t] = residual(c);
      gamma_cached[t] = args.gamma[c];
      if constexpr (kNorm == NormType::kLayerNorm) beta_cached[t] = args.beta[c];
    }
#pragma unroll
    for (int t = 0; t < kCached; ++t) {
      const int c = threadIdx.x + t * blockDim.x;
      if (c >= d) break;
      if (sum_out != nullptr) sum_out[c] = r_cached[t];
      add(r_cached[t]);
    }
  } else {
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      const float r = residual(c);
      if (sum_out != nullptr) sum_out[c] = r;
      add(r);
    }
  }
  const double moment = BlockSum(local, scratch) / static_cast<double>(d);
  // After this point x may have been overwritten through sum_out; read r back from there.
  auto stored = [&](int c) { return sum_out != nullptr ? sum_out[c] : residual(c); };

  float mean_f = 0.0f;
  float inv_std;
  if constexpr (kNorm == NormType::kLayerNorm) {
    double squares = 0.0;
    if constexpr (kCached > 0) {
#pragma unroll
      for (int t = 0; t < kCached; ++t) {
        if (static_cast<int>(threadIdx.x + t * blockDim.x) >= d) break;
        const double centred = r_cached[t] - moment;
        squares += centred * centred;
      }
    } else {
      for (int c = threadIdx.x; c < d; c += blockDim.x) {
        const double centred = stored(c) - moment;
        squares += centred * centred;
      }
    }
    const double variance = BlockSum(squares, scratch) / static_cast<double>(d);
    mean_f = static_cast<float>(moment);
    inv_std = static_cast<float>(1.0 / sqrt(variance + static_cast<double>(args.eps)));
  } else {
    inv_std = static_cast<float>(1.0 / sqrt(moment + static_cast<double>(args.eps)));
  }

  float* y = args.y == nullptr ? nullptr : args.y + offset;
  T* y_t = args.y_t == nullptr ? nullptr : static_cast<T*>(args.y_t) + offset;
  // Unfused, in the CPU kernels' order (they are built with -ffp-contract=off).
  auto normalised = [&](float r, float gamma, float beta) {
    if constexpr (kNorm == NormType::kLayerNorm) {
      return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(r, mean_f), inv_std), gamma), beta);
    } else {
      return __fmul_rn(__fmul_rn(r, inv_std), gamma);
    }
  };
  auto write = [&](int c, float v) {
    if (y != nullptr) y[c] = v;
    if (y_t != nullptr) y_t[c] = FromFloat<T>(v);
  };
  if constexpr (kCached > 0) {
#pragma unroll
    for (int t = 0; t < kCached; ++t) {
      const int c = threadIdx.x + t * blockDim.x;
      if (c >= d) break;
      write(c, normalised(r_cached[t], gamma_cached[t],
                          kNorm == NormType::kLayerNorm ? beta_cached[t] : 0.0f));
    }
  } else {
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      write(c, normalised(stored(c), args.gamma[c],
                          kNorm == NormType::kLayerNorm ? args.beta[c] : 0.0f));
    }
  }
}

// AddNormRow for any args.norm and args.d, chosen at run time: the row held in registers up to
// kAddNormThreads · kAddNormMaxCached values (the same bits as AddNormKernel's choice, since
// every large enough kCached visits the same columns in the same order), re-read beyond.
template <typename T, typename Delta = const float*>
__device__ __forceinline__ void AddNormRowOfAnyWidth(const AddNormArgs& args, int64_t row,
                                                     double* scratch) {
  const bool cached = args.d <= kAddNormThreads * kAddNormMaxCached;
  if (args.norm == NormType::kLayerNorm) {
    cached ? AddNormRow<T, NormType::kLayerNorm, kAddNormMaxCached, Delta>(args, row, scratch)
           : AddNormRow<T, NormType::kLayerNorm, 0, Delta>(args, row, scratch);
  } else {
    cached ? AddNormRow<T, NormType::kRmsNorm, kAddNormMaxCached, Delta>(args, row, scratch)
           : AddNormRow<T, NormType::kRmsNorm, 0, Delta>(args, row, scratch);
  }
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_ADD_NORM_CUH_
