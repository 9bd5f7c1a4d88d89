// The CPU backend's layer components: one object per mixer, norm and MLP of the model, made by
// CreateCpuLayers from the layer list (model/layers/) by kind. CpuBackend runs them in order
// over the rows of a pass; each mixer finds its slice of a slot's state at its offset
// (ModelConfig::StateOffsets) and never sees the other layers' slices.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/linear_attention.h"
#include "kernels/cpu/packed_matrix.h"
#include "model/backend/backend.h"
#include "model/model.h"

namespace linserve {

// Scratch shared by every layer (one runs at a time): numbered buffers, each as large as the
// largest request any layer made for it before Allocate.
class CpuWorkspace {
 public:
  void Reserve(int index, int64_t floats);
  void Allocate();
  float* buffer(int index) { return buffers_[static_cast<size_t>(index)].data(); }

 private:
  std::vector<int64_t> sizes_;
  std::vector<cpu::FloatBuffer> buffers_;
};

// Consecutive rows of one prefill pass: tokens of one item for `slot`, starting at a multiple
// of the chunk size from the item's first token.
struct PrefillPiece {
  int32_t slot;
  int first_row;
  int rows;
};

// The rows of one pass and where their sessions' states are.
struct CpuPass {
  int rows = 0;
  // Prefill: the rows are these pieces (chunked form). Decode: row i is one token of slot
  // decode_slots[i] (recurrent form).
  bool prefill = false;
  absl::Span<const PrefillPiece> pieces;
  absl::Span<const int32_t> decode_slots;
  // Slot s's state is states + s · state_floats.
  float* states = nullptr;
  int64_t state_floats = 0;
};

// A prefill pass's pieces as the attention kernels take them (cpu::LinearAttentionPrefill),
// each with its slot's layer state at `state_offset` floats into the slot, into `out`.
void PassPrefillRows(const CpuPass& pass, int64_t state_offset,
                     std::vector<cpu::PrefillRows>& out);

// Sizes every component shares.
struct CpuLayerContext {
  const Model& model;
  const BackendOptions& options;
  int threads = 1;
  int max_rows = 0;  // rows of one pass at most
  CpuWorkspace& workspace;
};

// The data of `weights`' tensor `name`, or null when the layer holds none (a bias turned off).
inline const float* OptionalData(const LayerWeights& weights, std::string_view name) {
  const Tensor* t = weights.Find(name);
  return t == nullptr ? nullptr : t->data.data();
}

// The CPU's packing of `requested` (auto: fp32).
cpu::WeightFormat CpuWeightFormat(WeightPrecision requested);

// `t` ([out_features, in_features]) packed in CpuWeightFormat(context.options.weight_precision);
// in int8 from its stored q and scales when the file stored it int8 (Tensor::int8_q).
cpu::PackedMatrix PackWeights(const CpuLayerContext& context, const Tensor& t);

class CpuNorm {
 public:
  virtual ~CpuNorm() = default;
  // out[r] = norm(in[r]) for `rows` rows of d_model; `out` may be `in`.
  virtual void Apply(const float* in, int rows, float* out) const = 0;
};

class CpuMixer {
 public:
  virtual ~CpuMixer() = default;
  // Reads `pass.rows` rows of `in` (d_model wide), advances the state slices of their slots and
  // adds its output to the same rows of `residual`.
  virtual void Forward(const float* in, const CpuPass& pass, float* residual) = 0;
};

class CpuMlp {
 public:
  virtual ~CpuMlp() = default;
  // Adds mlp(in[r]) to residual[r] for `rows` rows.
  virtual void Forward(const float* in, int rows, float* residual) = 0;
};

struct CpuLayer {
  std::unique_ptr<CpuNorm> norm1, norm2;  // norm2 null with the MLP kind "none"
  std::unique_ptr<CpuMixer> mixer;
  std::unique_ptr<CpuMlp> mlp;  // null with the MLP kind "none"
};

struct CpuLayers {
  std::vector<CpuLayer> layers;
  std::unique_ptr<CpuNorm> final_norm;  // pre-norm models only
};

// Each kind's CPU implementation, model/backend/cpu/cpu_<file>.cc, declared here from the list
// of kinds (model/layers/kind_list.inc). A mixer reads its tensors from `weights` and its slice
// of each slot's state at `state_offset` floats; a norm kind without a shift ignores `shift`.
#define LINSERVE_MIXER(Name, file)                                                      \
  std::unique_ptr<CpuMixer> CreateCpu##Name(const CpuLayerContext& context,            \
                                            const ComponentSpec& spec,                 \
                                            const LayerWeights& weights, int64_t state_offset);
#define LINSERVE_NORM(Name, file)                                                       \
  std::unique_ptr<CpuNorm> CreateCpu##Name(const CpuLayerContext& context,             \
                                           const ComponentSpec& spec, const Tensor& scale, \
                                           const Tensor& shift);
#define LINSERVE_MLP(Name, file)                                                        \
  std::unique_ptr<CpuMlp> CreateCpu##Name(const CpuLayerContext& context,              \
                                          const ComponentSpec& spec, const LayerWeights& weights);
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP

// One CpuLayer per layer of the model and its final norm, each made by its kind's
// implementation; reserves their scratch in context.workspace.
CpuLayers CreateCpuLayers(const CpuLayerContext& context);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_H_
