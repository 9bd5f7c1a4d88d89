// ModelWeights: every tensor of a model, converted to fp32 on the host: the model-level ones in
// named fields, each layer's by name (LayerWeights).
// Layouts follow PyTorch's nn.Linear: a projection weight is [out_features, in_features]. Which
// tensors a layer holds is declared by its kinds (model/layers/); the rest are here.
#ifndef LINSERVE_MODEL_FORMAT_WEIGHTS_H_
#define LINSERVE_MODEL_FORMAT_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/format/config.h"
#include "model/format/safetensors.h"
#include "model/layers/layer_weights.h"

namespace linserve {

struct ModelWeights {
  Tensor token_embedding;         // embed.weight                             [vocab, d_model]
  Tensor position_embedding;      // pos_embed.weight                         [max_position, d_model] (learned only)
  std::vector<LayerWeights> layers;
  // final_norm.weight / .bias: pre-norm only, as the final norm's kind declares ([d_model]).
  Tensor final_norm_weight, final_norm_bias;
  Tensor lm_head;                 // lm_head.weight                           [vocab, d_model] (untied only)

  // logits = h · head()ᵀ: the token embedding when tied, lm_head otherwise.
  const Tensor& head(const ModelConfig& config) const {
    return config.tie_embeddings ? token_embedding : lm_head;
  }
  int64_t ParameterCount() const;
};

// One tensor of model.safetensors: its name and the shape a config requires of it.
struct TensorSpec {
  std::string name;            // e.g. "layers.3.attn.q_proj.weight"
  std::vector<int64_t> shape;
  // A projection matrix [out, in] (TensorDecl::projection, and lm_head.weight): I8 with
  // "<name>.scales" in a file whose config declares weight_format int8.
  bool projection = false;
};

// The name of the scales tensor of an int8-stored projection: "<name>.scales".
std::string Int8ScalesName(const std::string& name);

// Calls fn(spec, tensor) for every tensor `config` requires, in a fixed order (embeddings, then
// each layer, then the final norm and head), skipping the fields the config leaves absent.
// weights.layers must hold config.n_layers layers; a declared tensor a layer lacks is visited as
// an empty one. ForEachTensorToFill first resizes weights.layers to config.n_layers and adds
// each layer's declared tensors (empty) to LayerWeights::tensors.
void ForEachTensor(const ModelConfig& config, const ModelWeights& weights,
                   absl::FunctionRef<void(const TensorSpec&, const Tensor&)> fn);
// Fills `weights`: ForEachTensor's visit with each tensor mutable.
void ForEachTensorToFill(const ModelConfig& config, ModelWeights& weights,
                         absl::FunctionRef<void(const TensorSpec&, Tensor&)> fn);

// Checks that `weights` holds exactly what `config` requires: every required tensor with its
// shape and matching data size, no layer tensor its kinds do not declare, every other
// model-level field empty, all values finite. Errors are
// INVALID_ARGUMENT and name the tensor, the expected and the actual shape.
absl::Status ValidateWeights(const ModelConfig& config, const ModelWeights& weights);

// Reads the tensors `config` requires from a parsed model.safetensors, converting F32, F16 and
// BF16 to fp32. Errors are INVALID_ARGUMENT and name the file and every missing, unexpected or
// wrongly shaped tensor (expected vs actual shape), a tensor of another dtype, or the first
// non-finite value. With config weight_format int8 every projection must be I8 [out, in] with
// values in [-127, 127] and an F32 "<name>.scales" [out, ceil(in / 32)] of finite,
// non-negative values; the tensor then keeps them (Tensor::int8_q, int8_scales) and its data is
// q · scale. An I8 tensor under weight_format float is refused naming the config field.
absl::StatusOr<ModelWeights> ReadModelWeights(const ModelConfig& config,
                                              const SafetensorsFile& file);

// The bytes of a model.safetensors holding `weights` (which must pass ValidateWeights), every
// tensor stored as `dtype`: F32, F16 or BF16; a config of weight_format int8 is
// INVALID_ARGUMENT (reference/quantize_weights.py writes that format). Deterministic: the same weights give the same bytes.
absl::StatusOr<std::string> SerializeModelWeights(const ModelConfig& config,
                                                  const ModelWeights& weights, Dtype dtype);

// SerializeModelWeights, written to `path` through a temporary file renamed into place.
absl::Status WriteModelWeights(const ModelConfig& config, const ModelWeights& weights,
                               const std::string& path, Dtype dtype = Dtype::kF32);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_WEIGHTS_H_
