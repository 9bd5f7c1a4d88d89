// A block's dynamic shared memory: the limit without the opt-in, the device's limit with it, and
// the opt-in itself, for every launcher whose blocks may need more than 48 KiB.
#ifndef LINSERVE_KERNELS_CUDA_SHARED_MEMORY_CUH_
#define LINSERVE_KERNELS_CUDA_SHARED_MEMORY_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"

namespace linserve::cuda {

// A block's dynamic shared memory without the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize).
inline constexpr size_t kDefaultBlockSharedBytes = 48 * 1024;

// The current device's dynamic shared memory per block with the opt-in (227 KiB on an H100 or
// H200); kDefaultBlockSharedBytes when it cannot be read.
inline size_t MaxBlockSharedBytes() {
  int device = 0;
  int bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();  // this failure, not the next launch's
    return kDefaultBlockSharedBytes;
  }
  return static_cast<size_t>(bytes);
}

// Lets `kernel` launch with `bytes` of dynamic shared memory (the opt-in above
// kDefaultBlockSharedBytes).
template <typename Kernel>
absl::Status AllowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultBlockSharedBytes) {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  return absl::OkStatus();
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_SHARED_MEMORY_CUH_
