// The kinds a layer is built from, each declared once: a mixer (mixes information across
// positions and owns a fixed-size slice of each session's state), a norm and an MLP. A kind
// declares its parameters (param.h), the tensors it reads and, for a mixer, its state slice.
// Adding a kind is its own files (a file here declaring it, one implementation per backend:
// model/backend/cpu/cpu_<file>.cc, model/backend/cuda/cuda_<file>.cc) and one line in
// model/layers/kind_list.inc (docs/architecture.md §4.6, "Adding a kind"); the engine, the
// sessions and the persistence code only ever see a session's state as
// ModelConfig::StateFloatsPerSlot() floats.
//
// The initial state of every mixer kind is all zeros: resetting a slot fills it with zeros, and
// a state at position 0 must be all zeros (ValidateSessionState, model/format/session_state.h).
#ifndef LINSERVE_MODEL_LAYERS_COMPONENT_KIND_H_
#define LINSERVE_MODEL_LAYERS_COMPONENT_KIND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/layers/param.h"

namespace linserve {

// One tensor a mixer or MLP reads: its name under "layers.{i}." (its key in LayerWeights) and
// its shape.
struct TensorDecl {
  std::string name;  // e.g. "attn.q_proj.weight"
  std::vector<int64_t> shape;
  // A projection matrix [out, in] (a Linear's weight): what the CPU backend packs in
  // --weight_precision's format and a file of weight_format int8 stores as I8.
  bool projection = false;
};

// One tensor a norm reads, named under the norm's prefix ("ln1.", "ln2." or "final_norm.").
// Its name is "weight" for the scale and "bias" for the shift: the loader, the backends and the
// CUDA upload read a layer's norms as "ln1.weight", "ln1.bias" (and ln2.).
struct NormTensorDecl {
  enum class Role { kScale, kShift };  // the instance's .weight and .bias
  std::string name;                    // "weight" or "bias"
  std::vector<int64_t> shape;
  Role role;
};

// Builds the error for one parameter of the component being checked (it names the field in
// config.json, e.g. layers[3].mixer.feature_dim).
using ParamErrorFn =
    absl::FunctionRef<absl::Status(const std::string& param, const std::string& message)>;

struct ComponentKind {
  std::string name;  // its "kind" in config.json
  std::string doc;   // one sentence for docs/model-format.md
  std::vector<ParamSpec> params;
  // Checks between parameters, once each is in range; null when there are none.
  absl::Status (*check)(const ParamValues& params, ParamErrorFn error) = nullptr;
};

// A value of a state slice that no session can hold: its index in the slice and what is wrong
// ("nan is not finite").
struct StateProblem {
  int64_t index = 0;
  std::string what;
};

struct MixerKind : ComponentKind {
  std::vector<TensorDecl> (*tensors)(const ParamValues& params, int64_t d_model) = nullptr;
  // Floats of the slice per session.
  int64_t (*state_floats)(const ParamValues& params) = nullptr;
  // The slice's layout, for the docs: "per head: S (feature_dim × head_dim) then z".
  std::string state_layout;
  // Where `index` lies in the slice, for messages: "head 2, z[5]".
  std::string (*locate_state)(const ParamValues& params, int64_t index) = nullptr;
  // The first value of `slice` (state_floats floats) that an imported state must not hold: not
  // finite, beyond `max_magnitude`, or impossible for the kind; none when all are fine.
  std::optional<StateProblem> (*check_state)(const ParamValues& params,
                                             absl::Span<const float> slice,
                                             float max_magnitude) = nullptr;
  // Whether the CUDA backend may store the slice in bf16 (--state_precision=bf16; the kernels
  // accumulate in fp32 and the kind's parity tests hold the bf16 bound). Default: fp32 only.
  bool bf16_state = false;
};

struct NormKind : ComponentKind {
  std::vector<NormTensorDecl> (*tensors)(const ParamValues& params, int64_t d_model) = nullptr;
};

struct MlpKind : ComponentKind {
  std::vector<TensorDecl> (*tensors)(const ParamValues& params, int64_t d_model) = nullptr;
  // False for "none" alone: the layer has no MLP and no second norm (no ln2.* tensors), and the
  // backends make neither. Default: true.
  bool present = true;
};

// What every kind's check_state asks of each value: finite and at most `max_magnitude` in
// magnitude. Returns the problem ("inf is not finite") or none.
std::optional<std::string> CheckStateValue(float value, float max_magnitude);

// The first value of `slice` CheckStateValue refuses, or none: the whole check of a kind whose
// slice holds no value with a narrower rule.
std::optional<StateProblem> CheckStateValues(absl::Span<const float> slice, float max_magnitude);

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_COMPONENT_KIND_H_
