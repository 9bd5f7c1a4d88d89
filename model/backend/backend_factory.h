// CreateBackend: picks the device a Backend runs on (the `--device auto|cuda|cpu` flag).
// The only place in the code base that knows whether the CUDA backend was compiled in.
#ifndef LINSERVE_MODEL_BACKEND_BACKEND_FACTORY_H_
#define LINSERVE_MODEL_BACKEND_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/backend/backend.h"
#include "model/model.h"

namespace linserve {

enum class DeviceSelection { kAuto, kCpu, kCuda };

// "auto", "cpu" or "cuda"; anything else is INVALID_ARGUMENT naming the value and the choices.
absl::StatusOr<DeviceSelection> ParseDeviceSelection(absl::string_view text);
absl::string_view ToString(DeviceSelection selection);

// Whether this build contains the CUDA backend (configured with CUDA on and nvcc present).
bool CudaBackendBuilt();

// kCpu: the CPU backend. kCuda: the CUDA backend on device 0 (it implements every layer kind of
// model/layers/kind_list.inc), or why not: UNIMPLEMENTED when the build has no CUDA backend,
// UNAVAILABLE when no device is usable, or CreateCudaBackend's own error (e.g.
// RESOURCE_EXHAUSTED). kAuto: the CUDA backend when it is built and a device is
// present, otherwise the CPU backend with an info log line saying why; a device that is present
// but fails to take the model is an error, not a silent fallback.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Model& model,
                                                       const BackendOptions& options,
                                                       DeviceSelection selection);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_BACKEND_FACTORY_H_
