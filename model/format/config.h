// ModelConfig: the parsed and range-checked contents of a model directory's config.json.
// docs/architecture.md §4 defines the semantics of every field.
#ifndef LINSERVE_MODEL_FORMAT_CONFIG_H_
#define LINSERVE_MODEL_FORMAT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/types.h"

namespace linserve {

enum class NormPlacement { kPre, kPost };              // "pre" | "post"
enum class Activation { kGelu, kGeluTanh, kRelu };     // "gelu" | "gelu_tanh" | "relu"
enum class FeatureMap { kEluPlusOne, kRelu, kExp, kFavorPlus };  // "elu_plus_one" | "relu" | "exp" | "favor_plus"
enum class PositionEmbedding { kLearned, kSinusoidal, kNone };   // "learned" | "sinusoidal" | "none"
enum class TokenizerKind { kByte, kSentencePiece };    // "byte" | "sentencepiece"

// config.json, field by field. Every field is required unless a default is given.
struct ModelConfig {
  std::string architecture = "linear_transformer";  // must be exactly this
  int32_t vocab_size = 0;     // [1, 1 << 20]; for the byte tokenizer exactly 256 + specials
  int32_t d_model = 0;        // [1, 65536]; == n_heads * head_dim
  int32_t n_layers = 0;       // [1, 1024]
  int32_t n_heads = 0;        // [1, 1024]
  int32_t head_dim = 0;       // [1, 4096]
  int32_t d_ff = 0;           // [1, 1 << 20]
  // Width of φ(x): head_dim for every map but favor_plus, where it is the number of random
  // features m ([1, 16384]). Default: head_dim.
  int32_t feature_dim = 0;
  NormPlacement norm = NormPlacement::kPre;
  Activation activation = Activation::kGelu;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  PositionEmbedding position = PositionEmbedding::kSinusoidal;
  int32_t max_position = 0;   // learned positions only: table rows, [1, 1 << 24]; else 0
  bool bias = true;           // biases on the q/k/v/o and FFN projections
  bool tie_embeddings = true; // logits = h · token_embeddingᵀ
  double attention_eps = 1e-6;   // (0, 1]; denominator guard in φ(q)ᵀS / (φ(q)ᵀz + eps)
  double layer_norm_eps = 1e-5;  // (0, 1]
  TokenizerKind tokenizer = TokenizerKind::kByte;
  TokenId bos_token_id = -1;  // -1: none; else in [0, vocab_size)
  TokenId eos_token_id = -1;  // -1: none; else in [0, vocab_size)

  // Floats of recurrent state per session: n_layers · n_heads · feature_dim · (head_dim + 1).
  int64_t StateFloatsPerSlot() const;
};

// Parses and checks config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source);

// Serialises back to config.json text (round-trips through ParseModelConfig).
std::string ModelConfigToJson(const ModelConfig& config);

std::string_view ToString(NormPlacement v);
std::string_view ToString(Activation v);
std::string_view ToString(FeatureMap v);
std::string_view ToString(PositionEmbedding v);
std::string_view ToString(TokenizerKind v);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_CONFIG_H_
