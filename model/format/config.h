// ModelConfig: the parsed and range-checked contents of a model directory's config.json.
// docs/architecture.md §4 defines the semantics of every field; docs/model-format.md lists them.
//
// A model is a list of layers (model/layers/layer_spec.h). config.json describes it either with
// "layers", one entry per layer naming its mixer, norm and MLP kinds and their parameters, or
// with the single-block schema: global fields (n_heads, head_dim, d_ff, ...) that describe n_layers
// identical linear_attention / layer_norm / ffn layers.
#ifndef LINSERVE_MODEL_FORMAT_CONFIG_H_
#define LINSERVE_MODEL_FORMAT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/layers/ffn.h"
#include "model/layers/layer_spec.h"
#include "model/layers/linear_attention.h"
#include "model/types.h"

namespace linserve {

enum class NormPlacement { kPre, kPost };              // "pre" | "post"
enum class PositionEmbedding { kLearned, kSinusoidal, kNone };   // "learned" | "sinusoidal" | "none"
// "byte" | "sentencepiece" | "gpt2_bpe" | "none" (ids only: model/tokenizer/no_tokenizer.h)
enum class TokenizerKind { kByte, kSentencePiece, kGpt2Bpe, kNone };
// How model.safetensors stores the projection matrices (every Linear's weight and lm_head):
// "float" (F32, F16 or BF16) or "int8" (I8 plus "<name>.scales", docs/model-format.md).
enum class WeightFileFormat { kFloat, kInt8 };
// The one block size of stored int8 weights: one F32 scale per this many input features, the
// CPU backend's int8 block (kernels/cpu/packed_matrix.h kInt8Block).
inline constexpr int32_t kInt8WeightBlock = 32;

// config.json, field by field. Every field is required unless a default is given. The fields
// from n_heads to layer_norm_eps marked "single-block" describe every layer when `layers` is
// empty; with "layers" in the file they must be absent there, and are filled from the layers
// when every layer is that same block (else n_heads, head_dim, feature_dim and d_ff are 0), for
// the code that still reads them (GetModelInfo's fields, server/transport/convert.cc).
struct ModelConfig {
  std::string architecture = "linear_transformer";  // must be exactly this
  // [1, 1 << 20]; for the byte tokenizer exactly 256 + specials; for gpt2_bpe at least the
  // tokenizer's vocabulary (LoadTokenizer checks)
  int32_t vocab_size = 0;
  int32_t d_model = 0;        // [1, 65536]; single-block: == n_heads * head_dim
  int32_t n_layers = 0;       // [1, 1024]; with "layers", optional and equal to its length
  int32_t n_heads = 0;        // [1, 1024]; single-block
  int32_t head_dim = 0;       // [1, 4096]; single-block
  int32_t d_ff = 0;           // [1, 1 << 20]; single-block
  // Width of φ(x): head_dim for every map but favor_plus, where it is the number of random
  // features m ([1, 16384]). Default: head_dim. Single-block.
  int32_t feature_dim = 0;
  NormPlacement norm = NormPlacement::kPre;  // every layer's and the final norm's placement
  Activation activation = Activation::kGelu;        // single-block
  FeatureMap feature_map = FeatureMap::kEluPlusOne;  // single-block
  PositionEmbedding position = PositionEmbedding::kSinusoidal;
  int32_t max_position = 0;   // learned positions only: table rows, [1, 1 << 24]; else 0
  bool bias = true;           // biases on the q/k/v/o and FFN projections; single-block
  bool tie_embeddings = true; // logits = h · token_embeddingᵀ
  // (0, 1]; denominator guard in φ(q)ᵀS / (φ(q)ᵀz + eps). Single-block.
  double attention_eps = 1e-6;
  double layer_norm_eps = 1e-5;  // (0, 1]; single-block
  TokenizerKind tokenizer = TokenizerKind::kByte;
  TokenId bos_token_id = -1;  // -1: none; else in [0, vocab_size)
  TokenId eos_token_id = -1;  // -1: none; else in [0, vocab_size)
  // config.json's "weight_format": {"kind": "int8", "block": 32} or {"kind": "float"}.
  // Default: float (the field absent).
  WeightFileFormat weight_format = WeightFileFormat::kFloat;

  // config.json's "layers", bottom first; empty for the single-block schema.
  std::vector<LayerSpec> layers;
  // config.json's "final_norm" (read only with "layers"): the norm before the head of a
  // pre-norm model. Default: the last layer's norm.
  ComponentSpec final_norm;

  // The layers, bottom first: `layers`, or n_layers copies of SingleBlockLayer().
  std::vector<LayerSpec> LayerList() const;
  // The layer the single-block fields describe.
  LayerSpec SingleBlockLayer() const;
  // The final norm: `final_norm` with "layers", else a layer_norm of layer_norm_eps.
  ComponentSpec FinalNorm() const;
  // Whether every layer (and the final norm) is the one the single-block fields describe: true
  // without "layers", and with "layers" that all say the same as those fields.
  bool IsSingleBlock() const;

  // Floats of state per session: the sum of the layers' mixer slices (for the single-block
  // schema n_layers · n_heads · feature_dim · (head_dim + 1)).
  int64_t StateFloatsPerSlot() const;
  // Where each layer's slice starts in a session's state: n_layers + 1 offsets, the last
  // StateFloatsPerSlot(). The state is the layers' slices concatenated, bottom first.
  std::vector<int64_t> StateOffsets() const;
};

// Parses and checks config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source);

// Serialises back to config.json text (round-trips through ParseModelConfig): the single-block
// schema when `layers` is empty, else "layers" and "final_norm".
std::string ModelConfigToJson(const ModelConfig& config);

std::string_view ToString(NormPlacement v);
std::string_view ToString(PositionEmbedding v);
std::string_view ToString(TokenizerKind v);
std::string_view ToString(WeightFileFormat v);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_CONFIG_H_
