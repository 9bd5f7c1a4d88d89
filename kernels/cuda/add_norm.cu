// Residual add + norm (LayerNorm or RMSNorm), fused: r = x + delta + bias is formed, optionally
// stored as the new residual, and normalised in the same kernel, so the output of every
// mixer/MLP GEMM is read once and the normalised row is written directly in the next GEMM's
// input type. One block per row; the statistics (LayerNorm: the mean, then the two-pass
// variance; RMSNorm: the mean of the squares) are accumulated in double with the fixed-order
// BlockSum, as the CPU kernels do (the residual stream grows with depth), so results are
// reproducible and match the CPU backend to rounding. Rows up to 4096 wide are held in registers
// (a row's passes then wait for memory once: the statistics' dependent passes made the kernel
// ~5 µs a row on an H200, bench/results/gpu.md); wider rows (d_model may be 65536) are not staged
// in shared memory: their later passes re-read r from L1/L2, which holds a row comfortably.
// In place is safe: each thread reads and writes only its own columns, and all reads of the
// statistics passes finish (barriers inside BlockSum) before the output pass writes.
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
// Rows of up to kThreads · kMaxCached values are held in registers (see AddNormKernel).
constexpr int kMaxCached = 16;

// kCached > 0: each thread holds its kCached values of the row (columns threadIdx.x + t ·
// blockDim.x) and their gamma/beta in registers, read once before the first reduction, so the
// later passes wait for no memory; d ≤ kCached · kThreads. kCached == 0: any d, the later passes
// re-reading r from L1/L2. Both visit a thread's columns in the same order, so they give the
// same bits.
template <typename T, NormType kNorm, int kCached>
__global__ void __launch_bounds__(kThreads) AddNormKernel(AddNormArgs args) {
  __shared__ double scratch[32];
  const int d = args.d;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * d;
  const float* x = args.x + offset;
  const float* delta = args.delta == nullptr ? nullptr : args.delta + offset;
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

template <typename T, NormType kNorm>
void Launch(cudaStream_t stream, const AddNormArgs& args) {
  const int per_thread = (args.d + kThreads - 1) / kThreads;
  if (per_thread <= 1) {
    AddNormKernel<T, kNorm, 1><<<args.rows, kThreads, 0, stream>>>(args);
  } else if (per_thread <= 2) {
    AddNormKernel<T, kNorm, 2><<<args.rows, kThreads, 0, stream>>>(args);
  } else if (per_thread <= 4) {
    AddNormKernel<T, kNorm, 4><<<args.rows, kThreads, 0, stream>>>(args);
  } else if (per_thread <= 8) {
    AddNormKernel<T, kNorm, 8><<<args.rows, kThreads, 0, stream>>>(args);
  } else if (per_thread <= kMaxCached) {
    AddNormKernel<T, kNorm, kMaxCached><<<args.rows, kThreads, 0, stream>>>(args);
  } else {
    AddNormKernel<T, kNorm, 0><<<args.rows, kThreads, 0, stream>>>(args);
  }
}

}  // namespace

absl::Status LaunchAddNorm(cudaStream_t stream, const AddNormArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.dtype, T, [&] {
    if (args.norm == NormType::kLayerNorm) {
      Launch<T, NormType::kLayerNorm>(stream, args);
    } else {
      Launch<T, NormType::kRmsNorm>(stream, args);
    }
    return LaunchStatus("AddNormKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
