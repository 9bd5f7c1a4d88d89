// The CUDA backend's layer components: one object per mixer, norm and MLP of the model, made by
// CreateCudaLayers from the layer list (model/layers/) by kind, as the CPU backend's are
// (model/backend/cpu/cpu_layer.h). CudaForward runs them in order over the rows of a pass; each
// mixer finds its slice of a slot's device state at its offset (ModelConfig::StateOffsets).
//
// The residual add is fused into the norm that follows it (one kernel), so a mixer or MLP
// writes its output delta without its output bias and runs that norm with the bias itself
// (Gemm::LinearAddNorm: in the output projection's own launch where the rows are few).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "model/backend/backend.h"
#include "model/backend/cuda/cuda_weights.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/model.h"

namespace linserve {

// The rows of one pass and where their sessions' states are.
struct CudaPass {
  int rows = 0;
  // Prefill: the rows are these sessions' pieces (device tables, kernels/cuda/prefill_pieces.h;
  // the kernels run once per layer for all of them). Decode (nullptr): row i is one token of the
  // slot workspace.device_rows.slots[i]; a negative slot is padding (zero state, no write).
  const cuda::PrefillTables* prefill = nullptr;
  const CudaWorkspace* workspace = nullptr;  // its state pool and scratch
  int64_t state_floats = 0;                  // per slot
};

// What every component is built with.
struct CudaLayerContext {
  const Model& model;
  const BackendOptions& options;
  cuda::DType dtype;
  int max_rows = 0;  // rows of one pass at most
  int segment = 0;   // prefill rows of one pass at most
  cuda::Gemm& gemm;
  ScratchPlan& scratch;  // components reserve their scratch here
};

class CudaNorm {
 public:
  virtual ~CudaNorm() = default;
  // The residual add and the norm over `rows` rows of act.x: with `pre` (pre-norm)
  // x += delta (+ delta_bias) and act.xt = norm(x); else x = norm(x + delta (+ delta_bias)) and
  // act.xt its copy in T. The delta and its bias are left unset (none: the norm alone) for the
  // component whose output they are to set.
  virtual cuda::AddNormArgs Args(const Activations& act, int rows, bool pre) const = 0;
};

// The fused add + norm kernel's arguments for CudaNorm::Args's contract: the residual and outputs
// of `rows` rows of act in `pre` or post placement. The norm sets its own fields (norm, gamma,
// beta, eps).
cuda::AddNormArgs ResidualNormArgs(const Activations& act, int rows, bool pre, int d_model,
                                   cuda::DType dtype);

class CudaMixer {
 public:
  virtual ~CudaMixer() = default;
  // INVALID_ARGUMENT when the kernels cannot run this mixer's shape.
  virtual absl::Status Check() const = 0;
  // After Check, once, before any pass: enqueues on `stream` what the mixer derives from its
  // shape alone into memory of its own (default: nothing).
  virtual absl::Status Prepare(cudaStream_t /*stream*/) { return absl::OkStatus(); }
  // Reads act.xt (T) for the pass's rows, advances the state slices of their slots, writes its
  // output, less its output bias, to act.proj and runs `then` (the norm after it, CudaNorm::Args)
  // with act.proj and that bias as its delta.
  virtual absl::Status Forward(cudaStream_t stream, const CudaPass& pass,
                               const cuda::AddNormArgs& then) = 0;
};

class CudaMlp {
 public:
  virtual ~CudaMlp() = default;
  // Reads act.xt (T) for `rows` rows, writes mlp(xt), less its output bias, to act.proj and
  // runs `then` (the norm after it) with act.proj and that bias as its delta.
  virtual absl::Status Forward(cudaStream_t stream, const CudaWorkspace& workspace, int rows,
                               const cuda::AddNormArgs& then) = 0;
};

struct CudaLayer {
  std::unique_ptr<CudaNorm> norm1, norm2;  // norm2 null with the MLP kind "none"
  std::unique_ptr<CudaMixer> mixer;
  std::unique_ptr<CudaMlp> mlp;  // null with the MLP kind "none"
};

struct CudaLayers {
  std::vector<CudaLayer> layers;
  std::unique_ptr<CudaNorm> final_norm;  // pre-norm models only
};

// Each kind's CUDA implementation, model/backend/cuda/cuda_<file>.cc, declared here from the
// list of kinds (model/layers/kind_list.inc). A mixer or MLP kind says how its tensors are placed
// on the device (CudaTensorsOf<Name>: the groups it reads from CudaLayerWeights, whatever its
// parameters turn off included) and reads them by group name; a mixer reads its slice of each
// slot's state at `state_offset` floats; a norm's scale and shift are its device tensors
// ([d_model] fp32; `shift` null, or ignored, for a kind without one).
#define LINSERVE_MIXER(Name, file)                                                                 \
  std::vector<CudaTensorGroup> CudaTensorsOf##Name(const ComponentSpec& spec);                     \
  std::unique_ptr<CudaMixer> CreateCuda##Name(                                                     \
      const CudaLayerContext& context, const ComponentSpec& spec, const CudaLayerWeights& weights, \
      int64_t state_offset);
#define LINSERVE_NORM(Name, file)                                                          \
  std::unique_ptr<CudaNorm> CreateCuda##Name(const CudaLayerContext& context,             \
                                             const ComponentSpec& spec, const float* scale, \
                                             const float* shift);
#define LINSERVE_MLP(Name, file)                                               \
  std::vector<CudaTensorGroup> CudaTensorsOf##Name(const ComponentSpec& spec); \
  std::unique_ptr<CudaMlp> CreateCuda##Name(const CudaLayerContext& context,   \
                                            const ComponentSpec& spec,         \
                                            const CudaLayerWeights& weights);
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP

// One CudaLayer per layer of the model and its final norm, each made by its kind's
// implementation, reading their weights from `weights`.
CudaLayers CreateCudaLayers(const CudaLayerContext& context, const CudaWeights& weights);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_H_
