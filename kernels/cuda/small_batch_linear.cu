// See small_batch_linear.h for why; every product accumulates in fp32 (fmaf), each lane over
// its own 8-element pieces of k, then the warp's 32 partial sums are added (WarpSum). The fused
// MLP form runs the same per-column arithmetic (a gated warp carries its value and gate columns
// side by side, each in its own order) and then activation.cuh's epilogue of the elementwise
// kernels, so its hidden rows are bitwise theirs. The fused residual add + norm stores y, then
// the block that finishes last (an arrival counter, self-resetting, so graph replays need no
// reset) runs add_norm.cuh's AddNormRow over the m rows with AddNormKernel's block size: bitwise
// AddNormKernel's rows. Each warp asks L2 for its weight rows before it waits for the kernel
// before it (dependent_launch.cuh), so they stream in while that kernel finishes.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/add_norm.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/small_batch_linear.h"

namespace linserve::cuda {
namespace {

constexpr int kWarps = 4;  // output columns per block
constexpr int kAddNormWarps = kAddNormThreads / 32;  // the fused add + norm's blocks

template <typename T>
struct alignas(16) Vec8 {
  T e[8];
};
static_assert(kSmallBatchLinearKMultiple == 8, "k is read in pieces of one Vec8");

// What a warp does with its column's sums: store them in y (accumulating or not), or finish an
// MLP's first layer into `hidden` (activation, or value ⊙ act(gate) over two weight rows), or
// store them in y for the residual add + norm that the last block runs (kAddNorm).
enum class Epilogue { kStore, kActivation, kGate, kAddNorm };

// Warps (output columns) per block.
template <Epilogue kEpilogue>
constexpr int kWarpsOf = kEpilogue == Epilogue::kAddNorm ? kAddNormWarps : kWarps;

struct Operands {
  const void* x = nullptr;
  const void* w = nullptr;
  float* y = nullptr;  // kStore, kAddNorm
  int64_t n = 0;       // output columns (kGate: w holds 2·n rows)
  int64_t k = 0;
  bool accumulate = false;                            // kStore
  ActivationKind activation = ActivationKind::kGelu;  // kActivation, kGate
  const float* bias = nullptr;                        // kActivation, kGate: optional
  void* hidden = nullptr;                             // kActivation, kGate: T [rows, n]
  AddNormArgs norm;                                   // kAddNorm: delta is y, rows m, d n
  unsigned* arrivals = nullptr;                       // kAddNorm: zero before and after the launch
};

Operands Product(const void* x, const void* w, int64_t n, int64_t k) {
  Operands op;
  op.x = x;
  op.w = w;
  op.n = n;
  op.k = k;
  return op;
}

// One column (two weight rows with a gate) of every row, by one warp.
template <typename T, int kRows, Epilogue kEpilogue>
__device__ __forceinline__ void Columns(const Operands& op, int64_t column, int lane) {
  constexpr int kWeights = kEpilogue == Epilogue::kGate ? 2 : 1;  // weight rows per warp
  const int64_t pieces = op.k / 8;
  const Vec8<T>* w[kWeights];
#pragma unroll
  for (int j = 0; j < kWeights; ++j) {
    w[j] = static_cast<const Vec8<T>*>(op.w) + (j * op.n + column) * pieces;
  }
  const Vec8<T>* x = static_cast<const Vec8<T>*>(op.x);
  float acc[kWeights][kRows];
#pragma unroll
  for (int j = 0; j < kWeights; ++j) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) acc[j][i] = 0.0f;
  }
#pragma unroll 4
  for (int64_t p = lane; p < pieces; p += 32) {
    float wf[kWeights][8];
#pragma unroll
    for (int j = 0; j < kWeights; ++j) {
      const Vec8<T> wv = w[j][p];
#pragma unroll
      for (int e = 0; e < 8; ++e) wf[j][e] = ToFloat(wv.e[e]);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const Vec8<T> xv = x[i * pieces + p];
#pragma unroll
      for (int j = 0; j < kWeights; ++j) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[j][i] = fmaf(ToFloat(xv.e[e]), wf[j][e], acc[j][i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float total = WarpSum(acc[0][i]);
    float gate = 0.0f;
    if constexpr (kWeights == 2) gate = WarpSum(acc[1][i]);
    if (lane != 0) continue;
    const int64_t at = i * op.n + column;
    if constexpr (kEpilogue == Epilogue::kStore || kEpilogue == Epilogue::kAddNorm) {
      op.y[at] = op.accumulate ? __fadd_rn(op.y[at], total) : total;
    } else if constexpr (kEpilogue == Epilogue::kActivation) {
      static_cast<T*>(op.hidden)[at] =
          FromFloat<T>(BiasActivate(total, op.bias, column, op.activation));
    } else {
      static_cast<T*>(op.hidden)[at] =
          FromFloat<T>(BiasGate(total, gate, op.bias, column, op.n, op.activation));
    }
  }
}

// The residual add + norm of the kernel's rows, by the block that finishes last.
template <typename T, int kRows>
__device__ void AddNormWhenLast(const Operands& op) {
  __shared__ bool last;
  __shared__ double scratch[32];
  __threadfence();  // this thread's columns of y, before the block's arrival counts them
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(op.arrivals, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) *op.arrivals = 0;
  // y through a volatile pointer: written by the other blocks, never a stale cached copy.
  for (int r = 0; r < kRows; ++r) {
    AddNormRowOfAnyWidth<T, const volatile float*>(op.norm, r, scratch);
  }
}

template <typename T, int kRows, Epilogue kEpilogue>
__global__ void __launch_bounds__(kWarpsOf<kEpilogue> * 32) SmallBatchLinearKernel(Operands op) {
  const int lane = threadIdx.x & 31;
  const int64_t column =
      static_cast<int64_t>(blockIdx.x) * kWarpsOf<kEpilogue> + (threadIdx.x >> 5);
  // The warp's weight rows into L2 while the kernel before still runs (dependent_launch.cuh).
  if (column < op.n) {
    const int64_t row_bytes = op.k * static_cast<int64_t>(sizeof(T));
    const char* w = static_cast<const char*>(op.w);
    PrefetchToL2(w + column * row_bytes, row_bytes, lane, 32);
    if constexpr (kEpilogue == Epilogue::kGate) {
      PrefetchToL2(w + (op.n + column) * row_bytes, row_bytes, lane, 32);
    }
  }
  AfterPriorKernel();
  // A whole warp skips: the shuffles below stay within live warps. Every block arrives.
  if (column < op.n) Columns<T, kRows, kEpilogue>(op, column, lane);
  if constexpr (kEpilogue == Epilogue::kAddNorm) AddNormWhenLast<T, kRows>(op);
}

static_assert(kSmallBatchLinearMaxRows == 4, "Launch has a case per row count");

template <typename T, Epilogue kEpilogue>
absl::Status Launch(cudaStream_t stream, const Operands& op, int64_t m) {
  constexpr int kBlockWarps = kWarpsOf<kEpilogue>;
  const unsigned blocks = static_cast<unsigned>((op.n + kBlockWarps - 1) / kBlockWarps);
  switch (m) {
    case 1:
      LaunchDependent(SmallBatchLinearKernel<T, 1, kEpilogue>, blocks, kBlockWarps * 32, 0, stream,
                      op);
      break;
    case 2:
      LaunchDependent(SmallBatchLinearKernel<T, 2, kEpilogue>, blocks, kBlockWarps * 32, 0, stream,
                      op);
      break;
    case 3:
      LaunchDependent(SmallBatchLinearKernel<T, 3, kEpilogue>, blocks, kBlockWarps * 32, 0, stream,
                      op);
      break;
    case 4:
      LaunchDependent(SmallBatchLinearKernel<T, 4, kEpilogue>, blocks, kBlockWarps * 32, 0, stream,
                      op);
      break;
  }
  return LaunchStatus("SmallBatchLinearKernel", __FILE__, __LINE__);
}

template <Epilogue kEpilogue>
absl::Status LaunchFor(cudaStream_t stream, DType dtype, const Operands& op, int64_t m) {
  if (dtype == DType::kBf16) return Launch<__nv_bfloat16, kEpilogue>(stream, op, m);
  return Launch<__half, kEpilogue>(stream, op, m);
}

absl::Status CheckOperands(DType dtype, const void* x, const void* w, int64_t m, int64_t n,
                           int64_t k) {
  if (!SmallBatchLinearApplies(dtype, x, w, m, k) || n < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchSmallBatchLinear: needs a 16-bit type, 1 <= m <= ", kSmallBatchLinearMaxRows,
        ", k a multiple of 8 and 16-byte aligned x and w; got m ", m, ", n ", n, ", k ", k));
  }
  return absl::OkStatus();
}

}  // namespace

bool SmallBatchLinearApplies(DType dtype, const void* x, const void* w, int64_t m, int64_t k) {
  return dtype != DType::kF32 && m >= 1 && m <= kSmallBatchLinearMaxRows &&
         k % kSmallBatchLinearKMultiple == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

absl::Status LaunchSmallBatchLinear(cudaStream_t stream, DType dtype, const void* x,
                                    const void* w, float* y, int64_t m, int64_t n, int64_t k,
                                    bool accumulate) {
  LINSERVE_RETURN_IF_ERROR(CheckOperands(dtype, x, w, m, n, k));
  Operands op = Product(x, w, n, k);
  op.y = y;
  op.accumulate = accumulate;
  return LaunchFor<Epilogue::kStore>(stream, dtype, op, m);
}

absl::Status LaunchSmallBatchLinearActivation(cudaStream_t stream, DType dtype, const void* x,
                                              const void* w, int64_t m, int64_t cols, int64_t k,
                                              const ActivationEpilogue& epilogue, void* hidden) {
  LINSERVE_RETURN_IF_ERROR(CheckOperands(dtype, x, w, m, cols, k));
  Operands op = Product(x, w, cols, k);
  op.activation = epilogue.activation;
  op.bias = epilogue.bias;
  op.hidden = hidden;
  if (epilogue.gate) return LaunchFor<Epilogue::kGate>(stream, dtype, op, m);
  return LaunchFor<Epilogue::kActivation>(stream, dtype, op, m);
}

absl::Status LaunchSmallBatchLinearAddNorm(cudaStream_t stream, DType dtype, const void* x,
                                           const void* w, float* y, int64_t m, int64_t n, int64_t k,
                                           const AddNormArgs& then, unsigned* arrivals) {
  LINSERVE_RETURN_IF_ERROR(CheckOperands(dtype, x, w, m, n, k));
  if (then.rows != m || then.d != n || then.delta != y || then.dtype != dtype ||
      arrivals == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchSmallBatchLinearAddNorm: the add + norm must be over the product (rows ", then.rows,
        " for m ", m, ", d ", then.d, " for n ", n,
        ", delta y, the weights' type) with an arrival counter"));
  }
  Operands op = Product(x, w, n, k);
  op.y = y;
  op.norm = then;
  op.arrivals = arrivals;
  return LaunchFor<Epilogue::kAddNorm>(stream, dtype, op, m);
}

}  // namespace linserve::cuda
