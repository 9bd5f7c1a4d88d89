// See small_batch_linear.h for why; every product accumulates in fp32 (fmaf), each lane over
// its own 8-element pieces of k, then the warp's 32 partial sums are added (WarpSum).
#include "kernels/cuda/small_batch_linear.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"

namespace linserve::cuda {
namespace {

constexpr int kWarps = 4;  // output columns per block

template <typename T>
struct alignas(16) Vec8 {
  T e[8];
};

struct Operands {
  const void* x;
  const void* w;
  float* y;
  int64_t n;
  int64_t k;
  bool accumulate;
};

template <typename T, int kRows>
__global__ void __launch_bounds__(kWarps * 32) SmallBatchLinearKernel(Operands op) {
  const int lane = threadIdx.x & 31;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (column >= op.n) return;  // a whole warp: the shuffles below stay within live warps
  const int64_t pieces = op.k / 8;
  const Vec8<T>* w = static_cast<const Vec8<T>*>(op.w) + column * pieces;
  const Vec8<T>* x = static_cast<const Vec8<T>*>(op.x);
  float acc[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
#pragma unroll 4
  for (int64_t p = lane; p < pieces; p += 32) {
    const Vec8<T> wv = w[p];
    float wf[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) wf[e] = ToFloat(wv.e[e]);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const Vec8<T> xv = x[i * pieces + p];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i] = fmaf(ToFloat(xv.e[e]), wf[e], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float total = WarpSum(acc[i]);
    if (lane == 0) {
      float* out = op.y + i * op.n + column;
      *out = op.accumulate ? __fadd_rn(*out, total) : total;
    }
  }
}

static_assert(kSmallBatchLinearMaxRows == 4, "Launch has a case per row count");

template <typename T>
absl::Status Launch(cudaStream_t stream, const Operands& op, int64_t m) {
  const unsigned blocks = static_cast<unsigned>((op.n + kWarps - 1) / kWarps);
  switch (m) {
    case 1:
      SmallBatchLinearKernel<T, 1><<<blocks, kWarps * 32, 0, stream>>>(op);
      break;
    case 2:
      SmallBatchLinearKernel<T, 2><<<blocks, kWarps * 32, 0, stream>>>(op);
      break;
    case 3:
      SmallBatchLinearKernel<T, 3><<<blocks, kWarps * 32, 0, stream>>>(op);
      break;
    case 4:
      SmallBatchLinearKernel<T, 4><<<blocks, kWarps * 32, 0, stream>>>(op);
      break;
  }
  return LaunchStatus("SmallBatchLinearKernel", __FILE__, __LINE__);
}

}  // namespace

bool SmallBatchLinearApplies(DType dtype, const void* x, const void* w, int64_t m, int64_t k) {
  return dtype != DType::kF32 && m >= 1 && m <= kSmallBatchLinearMaxRows && k % 8 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

absl::Status LaunchSmallBatchLinear(cudaStream_t stream, DType dtype, const void* x,
                                    const void* w, float* y, int64_t m, int64_t n, int64_t k,
                                    bool accumulate) {
  if (!SmallBatchLinearApplies(dtype, x, w, m, k) || n < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchSmallBatchLinear: needs a 16-bit type, 1 <= m <= ", kSmallBatchLinearMaxRows,
        ", k a multiple of 8 and 16-byte aligned x and w; got m ", m, ", n ", n, ", k ", k));
  }
  const Operands op{x, w, y, n, k, accumulate};
  if (dtype == DType::kBf16) return Launch<__nv_bfloat16>(stream, op, m);
  return Launch<__half>(stream, op, m);
}

}  // namespace linserve::cuda
