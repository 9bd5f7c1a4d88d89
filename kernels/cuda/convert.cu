// fp32 -> weight-type conversion, used once per tensor when the weights are uploaded. The host
// keeps every tensor in fp32 (ModelWeights), so the upload copies fp32 into a staging buffer and
// rounds on the device: one code path for all three types, with the same round-to-nearest-even
// as PyTorch's .to(torch.bfloat16 / torch.float16). A plain grid-stride loop; it runs once.
#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

template <typename T>
__global__ void ConvertKernel(const float* __restrict__ in, int64_t n, T* __restrict__ out) {
  AfterPriorKernel();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = FromFloat<T>(in[i]);
  }
}

}  // namespace

absl::Status LaunchConvert(cudaStream_t stream, const float* in, int64_t n, DType dtype,
                           void* out) {
  if (n <= 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  return LINSERVE_DISPATCH_DTYPE(dtype, T, [&] {
    LaunchDependent(ConvertKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream, in, n,
                    static_cast<T*>(out));
    return LaunchStatus("ConvertKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
