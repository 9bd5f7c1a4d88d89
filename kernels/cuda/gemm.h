// Linear layers on cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ (+ y), the nn.Linear layout, every
// matrix row-major and dense. x and w share one element type (fp32, fp16 or bf16); y is fp32 and
// every product accumulates in fp32 (CUBLAS_COMPUTE_32F: fp32 inputs never take the TF32 path,
// which would break the 1e-4 parity with the CPU backend).
//
// A few rows of 16-bit inputs (small_batch_linear.h: m ≤ 4, k a multiple of 8, 16-byte aligned
// operands) go to our own kernel instead, which reads the weights once at batch 1–4 where
// cuBLASLt's small-batch kernels cost several times that, and which also finishes an MLP's
// first layer in the same launch (LinearActivation).
//
// Why cuBLASLt and a plan cache: a decode step issues ~4 GEMMs per layer whose shapes repeat
// every step, so the matmul descriptors, layouts and the heuristic's algorithm choice are built
// once per (shape, type, alignment) and reused; the workspace is owned here and fixed, which is
// what lets the calls be captured into a CUDA graph.
#ifndef LINSERVE_KERNELS_CUDA_GEMM_H_
#define LINSERVE_KERNELS_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {

// Not thread-safe; one per stream owner. Needs a current device when created and used.
class Gemm {
 public:
  // `workspace_bytes` of device memory is given to cuBLASLt for split-K and similar schemes.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x · wᵀ (accumulate: y += x · wᵀ). m, n, k >= 1. Pointers need only element alignment;
  // the algorithm is chosen for the alignment they actually have.
  absl::Status Linear(cudaStream_t stream, DType dtype, const void* x, const void* w, float* y,
                      int64_t m, int64_t n, int64_t k, bool accumulate = false);

  // An MLP's first layer: hidden (the weights' type, [m, cols]) = the epilogue (elementwise.h)
  // of x · wᵀ, w [cols, k] ([2·cols, k] with a gate). A few rows of 16-bit inputs
  // (SmallBatchLinearApplies) take one fused launch; otherwise the product goes through
  // `scratch` (fp32 [m, cols], [m, 2·cols] with a gate) into LaunchBiasActivation /
  // LaunchBiasGate. Both write bitwise the same hidden rows.
  absl::Status LinearActivation(cudaStream_t stream, DType dtype, const void* x, const void* w,
                                int64_t m, int64_t cols, int64_t k,
                                const ActivationEpilogue& epilogue, float* scratch, void* hidden);

  // y = x · wᵀ (fp32 [m, n]), then the residual add + norm `then` over it (elementwise.h; its
  // delta is set to y here, and then.rows must be m, then.d n, then.dtype dtype). A few rows of
  // 16-bit inputs take one launch (LaunchSmallBatchLinearAddNorm); otherwise Linear, then
  // LaunchAddNorm. Both write bitwise the same rows.
  absl::Status LinearAddNorm(cudaStream_t stream, DType dtype, const void* x, const void* w,
                             float* y, int64_t m, int64_t n, int64_t k, AddNormArgs then);

 private:
  struct Plan;
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, int, bool, int, int, int>;

  Gemm() = default;
  absl::StatusOr<const Plan*> GetPlan(const PlanKey& key);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer arrivals_;  // LinearAddNorm's counter (one unsigned, zero between launches)
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_GEMM_H_
