#include "model/format/config.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/format/field_reader.h"
#include "model/format/json_parse.h"
#include "model/format/layer_config.h"
#include "model/layers/kinds.h"
#include "model/layers/layer_norm.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kArchitecture = "linear_transformer";

template <typename Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

constexpr std::array<EnumName<NormPlacement>, 2> kNormNames = {{
    {NormPlacement::kPre, "pre"},
    {NormPlacement::kPost, "post"},
}};
constexpr std::array<EnumName<PositionEmbedding>, 3> kPositionNames = {{
    {PositionEmbedding::kLearned, "learned"},
    {PositionEmbedding::kSinusoidal, "sinusoidal"},
    {PositionEmbedding::kNone, "none"},
}};
constexpr std::array<EnumName<TokenizerKind>, 4> kTokenizerNames = {{
    {TokenizerKind::kByte, "byte"},
    {TokenizerKind::kSentencePiece, "sentencepiece"},
    {TokenizerKind::kGpt2Bpe, "gpt2_bpe"},
    {TokenizerKind::kNone, "none"},
}};

constexpr std::array<EnumName<WeightFileFormat>, 2> kWeightFormatNames = {{
    {WeightFileFormat::kFloat, "float"},
    {WeightFileFormat::kInt8, "int8"},
}};

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<EnumName<Enum>, N>& names, Enum value) {
  for (const auto& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

template <typename Enum, size_t N>
absl::Status ReadEnum(FieldReader& reader, std::string_view field,
                      const std::array<EnumName<Enum>, N>& names, Enum& out) {
  std::vector<std::string> texts;
  for (const auto& entry : names) texts.emplace_back(entry.name);
  int index = -1;
  if (absl::Status s = reader.Choice(field, texts, index); !s.ok()) return s;
  if (index >= 0) out = names[static_cast<size_t>(index)].value;
  return absl::OkStatus();
}

// A single-block field whose values are those of a kind's choice parameter.
template <typename Enum>
absl::Status ReadParamEnum(FieldReader& reader, std::string_view field, const ComponentKind& kind,
                           std::string_view param,
                           std::optional<Enum> (*from_string)(std::string_view), Enum& out) {
  for (const ParamSpec& spec : kind.params) {
    if (spec.name != param) continue;
    int index = -1;
    if (absl::Status s = reader.Choice(field, spec.choices, index); !s.ok()) return s;
    if (index >= 0) out = *from_string(spec.choices[static_cast<size_t>(index)]);
  }
  return absl::OkStatus();
}

// The single-block fields, which "layers" replaces.
constexpr std::array<std::string_view, 9> kSingleBlockFields = {
    "n_heads",     "head_dim", "d_ff",          "feature_dim",   "activation",
    "feature_map", "bias",     "attention_eps", "layer_norm_eps"};

absl::Status ReadSingleBlockFields(FieldReader& reader, ModelConfig& c) {
  absl::Status status;
  auto check = [&](absl::Status s) {
    if (status.ok()) status = std::move(s);
  };
  check(reader.Int("n_heads", 1, 1024, true, c.n_heads));
  check(reader.Int("head_dim", 1, 4096, true, c.head_dim));
  check(reader.Int("d_ff", 1, 1 << 20, true, c.d_ff));
  const bool feature_dim_given = reader.Find("feature_dim") != nullptr;
  check(reader.Int("feature_dim", 1, 16384, false, c.feature_dim));
  if (!status.ok()) return status;
  if (!feature_dim_given) c.feature_dim = c.head_dim;
  return absl::OkStatus();
}

// Fills the single-block fields from `c.layers` when every layer is one same block of the
// single-block kinds, so that code reading those fields sees the model; else leaves the sizes 0.
void FillSingleBlockFields(ModelConfig& c) {
  const LayerSpec& first = c.layers.front();
  const bool kinds = first.mixer.kind == LinearAttentionKind().name &&
                     first.norm.kind == LayerNormKind().name && first.mlp.kind == FfnKind().name;
  if (!kinds) return;
  const LinearAttentionParams attention = LinearAttentionParams::From(first.mixer.params);
  const FfnParams ffn = FfnParams::From(first.mlp.params);
  ModelConfig filled = c;
  filled.n_heads = attention.n_heads;
  filled.head_dim = attention.head_dim;
  filled.feature_dim = attention.feature_dim;
  filled.feature_map = attention.feature_map;
  filled.attention_eps = attention.eps;
  filled.bias = attention.bias;
  filled.d_ff = ffn.d_ff;
  filled.activation = ffn.activation;
  filled.layer_norm_eps = LayerNormParams::From(first.norm.params).eps;
  if (filled.IsSingleBlock()) c = std::move(filled);
}

absl::Status CheckCrossFields(const ModelConfig& c, FieldReader& reader) {
  if (c.layers.empty() && static_cast<int64_t>(c.n_heads) * c.head_dim != c.d_model) {
    return reader.Error(
        "d_model",
        absl::StrCat("must equal n_heads * head_dim = ", c.n_heads, " * ", c.head_dim, " = ",
                     static_cast<int64_t>(c.n_heads) * c.head_dim, ", got ", c.d_model));
  }
  if (c.layers.empty()) {
    // The single-block mixer's own checks (feature_dim against head_dim), in its words.
    if (absl::Status s =
            LinearAttentionKind().check(c.SingleBlockLayer().mixer.params,
                                        [&](const std::string& param, const std::string& message) {
                                          return reader.Error(param, message);
                                        });
        !s.ok()) {
      return s;
    }
  }
  if (c.position == PositionEmbedding::kLearned && c.max_position == 0) {
    return reader.Error("max_position",
                        "is required for position \"learned\" (table rows, in [1, 16777216])");
  }
  if (c.position != PositionEmbedding::kLearned && c.max_position != 0) {
    return reader.Error(
        "max_position",
        absl::StrCat("must be 0 or absent unless position is \"learned\" (it is \"",
                     std::string(ToString(c.position)), "\"), got ", c.max_position));
  }
  if (c.tokenizer == TokenizerKind::kByte && c.vocab_size < 256) {
    return reader.Error("vocab_size",
                        absl::StrCat("must be at least 256 for the byte tokenizer (256 byte ids "
                                     "plus specials), got ",
                                     c.vocab_size));
  }
  for (const auto& [field, id] :
       {std::pair<std::string_view, TokenId>{"bos_token_id", c.bos_token_id},
        {"eos_token_id", c.eos_token_id}}) {
    if (id != -1 && (id < 0 || id >= c.vocab_size)) {
      return reader.Error(field, absl::StrCat("must be -1 (none) or in [0, vocab_size) = [0, ",
                                              c.vocab_size, "), got ", id));
    }
  }
  return absl::OkStatus();
}

// "weight_format": {"kind": "float"} or {"kind": "int8", "block": 32}; absent is float.
absl::Status ReadWeightFormat(FieldReader& reader, std::string_view source, ModelConfig& c) {
  const Json* value = reader.Find("weight_format");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_object()) {
    return reader.Error("weight_format",
                        absl::StrCat("must be an object such as {\"kind\": \"int8\", \"block\": ",
                                     kInt8WeightBlock, "}, got ", DescribeJson(*value)));
  }
  FieldReader inner(*value, source, "weight_format.");
  if (inner.Find("kind") == nullptr) {
    return inner.Error("kind", "is required (\"float\" or \"int8\")");
  }
  if (absl::Status s = ReadEnum(inner, "kind", kWeightFormatNames, c.weight_format); !s.ok()) {
    return s;
  }
  if (c.weight_format == WeightFileFormat::kInt8) {
    int32_t block = 0;
    if (absl::Status s = inner.Int("block", 1, 1 << 20, true, block); !s.ok()) return s;
    if (block != kInt8WeightBlock) {
      return inner.Error("block", absl::StrCat("must be ", kInt8WeightBlock,
                                               " (one scale per 32 input features, the only "
                                               "int8 block linserve runs), got ",
                                               block));
    }
  }
  return inner.RejectUnknown();
}

// "layers", "final_norm" and n_layers beside them; the single-block fields must be absent.
absl::Status ReadLayers(const Json& layers, FieldReader& reader, std::string_view source,
                        ModelConfig& c) {
  for (std::string_view field : kSingleBlockFields) {
    if (reader.Find(field) != nullptr) {
      return reader.Error(field,
                          "belongs in each layer's mixer, norm or mlp when \"layers\" "
                          "is given (see docs/model-format.md)");
    }
  }
  absl::StatusOr<std::vector<LayerSpec>> parsed = ParseLayers(layers, source);
  if (!parsed.ok()) return parsed.status();
  c.layers = *std::move(parsed);
  const int32_t count = static_cast<int32_t>(c.layers.size());
  if (reader.Find("n_layers") != nullptr) {
    if (absl::Status s = reader.Int("n_layers", 1, 1024, true, c.n_layers); !s.ok()) return s;
    if (c.n_layers != count) {
      return reader.Error("n_layers", absl::StrCat("must equal the number of \"layers\" (", count,
                                                   ") when both are given, got ", c.n_layers));
    }
  }
  c.n_layers = count;
  if (const Json* final_norm = reader.Find("final_norm"); final_norm != nullptr) {
    absl::StatusOr<ComponentSpec> norm = ParseFinalNorm(*final_norm, source);
    if (!norm.ok()) return norm.status();
    c.final_norm = *std::move(norm);
  } else {
    c.final_norm = c.layers.back().norm;
  }
  return absl::OkStatus();
}

}  // namespace

LayerSpec ModelConfig::SingleBlockLayer() const {
  const LinearAttentionParams attention{.n_heads = n_heads,
                                        .head_dim = head_dim,
                                        .feature_dim = feature_dim,
                                        .feature_map = feature_map,
                                        .eps = attention_eps,
                                        .bias = bias};
  const FfnParams ffn{.d_ff = d_ff, .activation = activation, .bias = bias};
  return LayerSpec{.mixer = {.kind = LinearAttentionKind().name, .params = attention.ToValues()},
                   .norm = {.kind = LayerNormKind().name,
                            .params = LayerNormParams{.eps = layer_norm_eps}.ToValues()},
                   .mlp = {.kind = FfnKind().name, .params = ffn.ToValues()}};
}

std::vector<LayerSpec> ModelConfig::LayerList() const {
  if (!layers.empty()) return layers;
  return std::vector<LayerSpec>(static_cast<size_t>(n_layers), SingleBlockLayer());
}

ComponentSpec ModelConfig::FinalNorm() const {
  return layers.empty() ? SingleBlockLayer().norm : final_norm;
}

bool ModelConfig::IsSingleBlock() const {
  if (layers.empty()) return true;
  const LayerSpec block = SingleBlockLayer();
  for (const LayerSpec& layer : layers) {
    if (layer != block) return false;
  }
  return final_norm == block.norm;
}

int64_t ModelConfig::StateFloatsPerSlot() const {
  if (layers.empty()) return int64_t{n_layers} * n_heads * feature_dim * (int64_t{head_dim} + 1);
  return StateOffsets().back();
}

std::vector<int64_t> ModelConfig::StateOffsets() const {
  std::vector<int64_t> offsets = {0};
  if (layers.empty()) {
    const int64_t slice =
        LinearAttentionParams::From(SingleBlockLayer().mixer.params).StateFloats();
    for (int32_t l = 0; l < n_layers; ++l) offsets.push_back(offsets.back() + slice);
    return offsets;
  }
  for (const LayerSpec& layer : layers) {
    const MixerKind* kind = FindMixerKind(layer.mixer.kind);
    offsets.push_back(offsets.back() + kind->state_floats(layer.mixer.params));
  }
  return offsets;
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  absl::StatusOr<Json> parsed = ParseStrictJsonObject(json_text, source);
  if (!parsed.ok()) return parsed.status();
  FieldReader reader(*parsed, source);
  ModelConfig c;

  // Optional (its default is the one accepted value), but a file that names another
  // architecture describes a model this code would silently compute wrongly.
  const Json* architecture = reader.Find("architecture");
  if (architecture != nullptr &&
      (!architecture->is_string() || architecture->get<std::string>() != kArchitecture)) {
    return reader.Error("architecture", absl::StrCat("must be \"", std::string(kArchitecture),
                                                     "\", got ", DescribeJson(*architecture)));
  }

  const Json* layers = reader.Find("layers");
  absl::Status status;
  auto check = [&](absl::Status s) {
    if (status.ok()) status = std::move(s);
  };
  check(reader.Int("vocab_size", 1, 1 << 20, /*required=*/true, c.vocab_size));
  check(reader.Int("d_model", 1, 65536, true, c.d_model));
  if (layers == nullptr) {
    check(reader.Int("n_layers", 1, 1024, true, c.n_layers));
    check(ReadSingleBlockFields(reader, c));
  }
  check(ReadEnum(reader, "norm", kNormNames, c.norm));
  if (layers == nullptr) {
    check(ReadParamEnum(reader, "activation", FfnKind(), "activation", ActivationFromString,
                        c.activation));
    check(ReadParamEnum(reader, "feature_map", LinearAttentionKind(), "feature_map",
                        FeatureMapFromString, c.feature_map));
  }
  check(ReadEnum(reader, "position", kPositionNames, c.position));
  check(reader.Int("max_position", 0, 1 << 24, false, c.max_position));
  if (layers == nullptr) check(reader.Bool("bias", c.bias));
  check(reader.Bool("tie_embeddings", c.tie_embeddings));
  if (layers == nullptr) {
    check(reader.Epsilon("attention_eps", c.attention_eps));
    check(reader.Epsilon("layer_norm_eps", c.layer_norm_eps));
  }
  check(ReadEnum(reader, "tokenizer", kTokenizerNames, c.tokenizer));
  check(reader.Int("bos_token_id", -1, (1 << 20) - 1, false, c.bos_token_id));
  check(reader.Int("eos_token_id", -1, (1 << 20) - 1, false, c.eos_token_id));
  check(ReadWeightFormat(reader, source, c));
  if (layers != nullptr) check(ReadLayers(*layers, reader, source, c));
  if (!status.ok()) return status;
  if (absl::Status s = reader.RejectUnknown(); !s.ok()) return s;
  if (absl::Status s = CheckCrossFields(c, reader); !s.ok()) return s;
  if (!c.layers.empty()) FillSingleBlockFields(c);
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  // Ordered so that the file reads in the order of config.h.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const bool single_block = c.layers.empty();
  j["architecture"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  if (single_block) {
    j["n_heads"] = c.n_heads;
    j["head_dim"] = c.head_dim;
    j["d_ff"] = c.d_ff;
    j["feature_dim"] = c.feature_dim;
  }
  j["norm"] = ToString(c.norm);
  if (single_block) {
    j["activation"] = ToString(c.activation);
    j["feature_map"] = ToString(c.feature_map);
  }
  j["position"] = ToString(c.position);
  j["max_position"] = c.max_position;
  if (single_block) j["bias"] = c.bias;
  j["tie_embeddings"] = c.tie_embeddings;
  if (single_block) {
    j["attention_eps"] = c.attention_eps;
    j["layer_norm_eps"] = c.layer_norm_eps;
  }
  j["tokenizer"] = ToString(c.tokenizer);
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  if (c.weight_format == WeightFileFormat::kInt8) {
    j["weight_format"] = {{"kind", ToString(c.weight_format)}, {"block", kInt8WeightBlock}};
  }
  if (!single_block) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const LayerSpec& layer : c.layers) {
      nlohmann::ordered_json l = nlohmann::ordered_json::object();
      l["mixer"] = ComponentToJson(layer.mixer);
      l["norm"] = ComponentToJson(layer.norm);
      l["mlp"] = ComponentToJson(layer.mlp);
      layers.push_back(std::move(l));
    }
    j["layers"] = std::move(layers);
    j["final_norm"] = ComponentToJson(c.final_norm);
  }
  return j.dump(2) + "\n";
}

std::string_view ToString(NormPlacement v) { return NameOf(kNormNames, v); }
std::string_view ToString(PositionEmbedding v) { return NameOf(kPositionNames, v); }
std::string_view ToString(TokenizerKind v) { return NameOf(kTokenizerNames, v); }
std::string_view ToString(WeightFileFormat v) { return NameOf(kWeightFormatNames, v); }

}  // namespace linserve
