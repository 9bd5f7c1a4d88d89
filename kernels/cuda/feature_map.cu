// φ(q) and φ(k) for a run of token rows, one block per (head, row), written to fp32 buffers
// that the chunked prefill reads many times (each φ is reused by every query of its chunk, so
// computing it once here beats recomputing it in the product kernels). The decode path does
// not use this: it evaluates φ inside its fused kernel.
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/feature_map.cuh"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/shared_memory.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    FeatureMapsKernel(AttentionShape shape, const float* qkv, const float* qkv_bias, float* phi_q,
                      float* phi_k) {
  AfterPriorKernel();
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const int head = blockIdx.x;
  const int64_t row = blockIdx.y;
  const int dk = shape.key_dim;
  const int features = shape.feature_dim;
  float* xq = smem;
  float* xk = xq + dk;
  float* fq = xk + dk;
  float* fk = fq + features;
  LoadHeadQkv(shape, qkv, qkv_bias, row, head, xq, xk, nullptr);
  BlockFeatureMap(shape, xq, fq, scratch);
  BlockFeatureMap(shape, xk, fk, scratch);
  const int64_t out = (row * shape.heads + head) * features;
  for (int f = threadIdx.x; f < features; f += blockDim.x) {
    phi_q[out + f] = fq[f];
    phi_k[out + f] = fk[f];
  }
}

}  // namespace

absl::Status LaunchFeatureMaps(cudaStream_t stream, const AttentionShape& shape, const float* qkv,
                               const float* qkv_bias, int rows, float* phi_q, float* phi_k) {
  if (absl::Status status = CheckAttentionShape(shape); !status.ok()) return status;
  if (rows <= 0) return absl::OkStatus();
  const size_t smem = sizeof(float) * (2 * static_cast<size_t>(shape.key_dim) +
                                       2 * static_cast<size_t>(shape.feature_dim));
  LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(FeatureMapsKernel, smem));
  LaunchDependent(FeatureMapsKernel, dim3(shape.heads, rows), kThreads, smem, stream, shape, qkv,
                  qkv_bias, phi_q, phi_k);
  return LaunchStatus("FeatureMapsKernel", __FILE__, __LINE__);
}

}  // namespace linserve::cuda
