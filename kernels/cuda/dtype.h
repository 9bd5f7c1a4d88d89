// Element types of device matrices. Weights are stored in one of these; activations that feed a
// GEMM are written in the weights' type, everything else (residual stream, GEMM outputs,
// recurrent state) is fp32.
#ifndef LINSERVE_KERNELS_CUDA_DTYPE_H_
#define LINSERVE_KERNELS_CUDA_DTYPE_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace linserve::cuda {

enum class DType { kF32, kF16, kBf16 };

inline size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

inline absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DTYPE_H_
