#include "kernels/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace linserve::cuda {
namespace {

absl::string_view BaseName(absl::string_view file) {
  // Keep the path from the repository root (kernels/..., model/...) when it is there.
  for (absl::string_view root : {"kernels/", "model/", "tests/", "bench/"}) {
    if (size_t at = file.rfind(root); at != absl::string_view::npos) return file.substr(at);
  }
  return file;
}

absl::StatusCode CodeForCuda(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kUnavailable;
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::string_view CublasName(cublasStatus_t error) {
  switch (error) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cublasStatus_t";
}

absl::StatusCode CodeForCublas(cublasStatus_t error) {
  switch (error) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaErrorToStatus(cudaError_t error, absl::string_view call, absl::string_view file,
                               int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::Status(CodeForCuda(error),
                      absl::StrCat(call, " failed: ", cudaGetErrorString(error), " (",
                                   cudaGetErrorName(error), ") at ", BaseName(file), ":", line));
}

absl::Status CublasErrorToStatus(cublasStatus_t error, absl::string_view call,
                                 absl::string_view file, int line) {
  if (error == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(CodeForCublas(error),
                      absl::StrCat(call, " failed: ", CublasName(error), " (",
                                   static_cast<int>(error), ") at ", BaseName(file), ":", line));
}

absl::Status LaunchStatus(absl::string_view kernel, absl::string_view file, int line) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return CudaErrorToStatus(error, absl::StrCat("launch of ", kernel), file, line);
}

absl::StatusOr<int> CudaDeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) {
    // Clear the thread's last-error slot so that the next launch check does not report this.
    cudaGetLastError();
    if (reason != nullptr) {
      *reason = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(error), " (",
                             cudaGetErrorName(error), ")");
    }
    return 0;
  }
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaErrorToStatus(error, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
  }
  if (count == 0 && reason != nullptr) *reason = "cudaGetDeviceCount: 0 devices";
  return count;
}

}  // namespace linserve::cuda
