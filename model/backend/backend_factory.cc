#include "model/backend/backend_factory.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

#if LINSERVE_WITH_CUDA
#include "kernels/cuda/cuda_status.h"
#include "model/backend/cuda/cuda_backend.h"
#endif

namespace linserve {

absl::StatusOr<DeviceSelection> ParseDeviceSelection(absl::string_view text) {
  if (text == "auto") return DeviceSelection::kAuto;
  if (text == "cpu") return DeviceSelection::kCpu;
  if (text == "cuda") return DeviceSelection::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("device = \"", text, "\" is not one of auto, cpu, cuda"));
}

absl::string_view ToString(DeviceSelection selection) {
  switch (selection) {
    case DeviceSelection::kAuto:
      return "auto";
    case DeviceSelection::kCpu:
      return "cpu";
    case DeviceSelection::kCuda:
      return "cuda";
  }
  return "unknown";
}

#if LINSERVE_WITH_CUDA

bool CudaBackendBuilt() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Model& model,
                                                       const BackendOptions& options,
                                                       DeviceSelection selection) {
  if (selection == DeviceSelection::kCpu) return CreateCpuBackend(model, options);
  if (selection == DeviceSelection::kAuto) {
    std::string reason;
    absl::StatusOr<int> devices = cuda::CudaDeviceCount(&reason);
    if (!devices.ok() || *devices == 0) {
      spdlog::info("device auto: no usable CUDA device ({}); using the CPU backend",
                   devices.ok() ? reason : devices.status().ToString());
      return CreateCpuBackend(model, options);
    }
    spdlog::info("device auto: {} CUDA device(s) found; using the CUDA backend on device 0",
                 *devices);
  }
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CreateCudaBackend(model, options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

#else  // !LINSERVE_WITH_CUDA

bool CudaBackendBuilt() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Model& model,
                                                       const BackendOptions& options,
                                                       DeviceSelection selection) {
  if (selection == DeviceSelection::kCuda) {
    return absl::UnimplementedError(
        "device = cuda, but this build has no CUDA backend (configure with -DLINSERVE_CUDA=ON "
        "on a machine with nvcc)");
  }
  if (selection == DeviceSelection::kAuto) {
    spdlog::info("device auto: this build has no CUDA backend; using the CPU backend");
  }
  return CreateCpuBackend(model, options);
}

#endif  // LINSERVE_WITH_CUDA

}  // namespace linserve
