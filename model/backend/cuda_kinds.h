// The layer kinds the CUDA backend implements (model/backend/cuda/cuda_layer.cc), checked
// before any device is touched, so that a model using another kind is refused with its name in
// every build, with or without CUDA.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_KINDS_H_
#define LINSERVE_MODEL_BACKEND_CUDA_KINDS_H_

#include "absl/status/status.h"
#include "model/format/config.h"

namespace linserve {

// OK when the CUDA backend implements every mixer, norm and MLP kind of `config`; else
// UNIMPLEMENTED naming the first component that it lacks, e.g.
// `layers[2].mixer.kind = "short_conv": the CUDA backend does not implement this kind ...`.
absl::Status CheckCudaImplementsKinds(const ModelConfig& config);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_KINDS_H_
