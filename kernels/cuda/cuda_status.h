// The one place where CUDA runtime and cuBLAS error codes become absl::Status. Every CUDA or
// cuBLAS call in kernels/cuda and in the CUDA backend goes through these macros, so an error
// names the failing call (its source text), the file and line, and the library's own message.
//
// Codes: out-of-memory -> RESOURCE_EXHAUSTED; no device / no driver -> UNAVAILABLE; invalid
// arguments -> INVALID_ARGUMENT; everything else (launch failures, illegal addresses, ...) ->
// INTERNAL.
#ifndef LINSERVE_KERNELS_CUDA_CUDA_STATUS_H_
#define LINSERVE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linserve::cuda {

// `call` is the failing expression as written; `file`/`line` locate it.
absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view call, absl::string_view file,
                               int line);
absl::Status CublasErrorToStatus(cublasStatus_t error, absl::string_view call,
                                 absl::string_view file, int line);

// Status of the most recent kernel launch on this thread (cudaGetLastError), naming `kernel`.
absl::Status LaunchStatus(absl::string_view kernel, absl::string_view file, int line);

// Number of CUDA devices. A machine without a device or without a driver yields 0 devices and
// sets `*reason` (when given) to the runtime's explanation; other failures are errors.
absl::StatusOr<int> CudaDeviceCount(std::string* reason = nullptr);

}  // namespace linserve::cuda

#define LINSERVE_CUDA_RETURN_IF_ERROR(expr)                                                        \
  do {                                                                                             \
    if (const cudaError_t linserve_cuda_error_ = (expr); linserve_cuda_error_ != cudaSuccess) {    \
      return ::linserve::cuda::CudaErrorToStatus(linserve_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                                              \
  } while (false)

#define LINSERVE_CUBLAS_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                       \
    if (const cublasStatus_t linserve_cublas_status_ = (expr);                               \
        linserve_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                  \
      return ::linserve::cuda::CublasErrorToStatus(linserve_cublas_status_, #expr, __FILE__, \
                                                   __LINE__);                                \
    }                                                                                        \
  } while (false)

// For absl::Status expressions in the CUDA code (launchers and the CUDA backend).
#define LINSERVE_RETURN_IF_ERROR(expr)                                    \
  do {                                                                    \
    if (absl::Status linserve_status_ = (expr); !linserve_status_.ok()) { \
      return linserve_status_;                                            \
    }                                                                     \
  } while (false)

// After a launch (LaunchDependent): returns the launch error, if any, naming the kernel.
#define LINSERVE_CUDA_RETURN_IF_LAUNCH_FAILED(kernel_name)                   \
  do {                                                                       \
    if (absl::Status linserve_launch_status_ =                               \
            ::linserve::cuda::LaunchStatus(kernel_name, __FILE__, __LINE__); \
        !linserve_launch_status_.ok()) {                                     \
      return linserve_launch_status_;                                        \
    }                                                                        \
  } while (false)

#endif  // LINSERVE_KERNELS_CUDA_CUDA_STATUS_H_
