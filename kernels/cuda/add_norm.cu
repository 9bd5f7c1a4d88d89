// Residual add + norm (LayerNorm or RMSNorm), fused: one block per row runs add_norm.cuh's
// AddNormRow, so the output of every mixer/MLP GEMM is read once and the normalised row is
// written directly in the next GEMM's input type.
#include "kernels/cuda/add_norm.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

template <typename T, NormType kNorm, int kCached>
__global__ void __launch_bounds__(kAddNormThreads) AddNormKernel(AddNormArgs args) {
  AfterPriorKernel();
  __shared__ double scratch[32];
  AddNormRow<T, kNorm, kCached>(args, blockIdx.x, scratch);
}

template <typename T, NormType kNorm>
void Launch(cudaStream_t stream, const AddNormArgs& args) {
  const int per_thread = (args.d + kAddNormThreads - 1) / kAddNormThreads;
  if (per_thread <= 1) {
    LaunchDependent(AddNormKernel<T, kNorm, 1>, args.rows, kAddNormThreads, 0, stream, args);
  } else if (per_thread <= 2) {
    LaunchDependent(AddNormKernel<T, kNorm, 2>, args.rows, kAddNormThreads, 0, stream, args);
  } else if (per_thread <= 4) {
    LaunchDependent(AddNormKernel<T, kNorm, 4>, args.rows, kAddNormThreads, 0, stream, args);
  } else if (per_thread <= 8) {
    LaunchDependent(AddNormKernel<T, kNorm, 8>, args.rows, kAddNormThreads, 0, stream, args);
  } else if (per_thread <= kAddNormMaxCached) {
    LaunchDependent(AddNormKernel<T, kNorm, kAddNormMaxCached>, args.rows, kAddNormThreads, 0,
                    stream, args);
  } else {
    LaunchDependent(AddNormKernel<T, kNorm, 0>, args.rows, kAddNormThreads, 0, stream, args);
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
