#include "model/format/config.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/format/json_parse.h"
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
constexpr std::array<EnumName<Activation>, 3> kActivationNames = {{
    {Activation::kGelu, "gelu"},
    {Activation::kGeluTanh, "gelu_tanh"},
    {Activation::kRelu, "relu"},
}};
constexpr std::array<EnumName<FeatureMap>, 4> kFeatureMapNames = {{
    {FeatureMap::kEluPlusOne, "elu_plus_one"},
    {FeatureMap::kRelu, "relu"},
    {FeatureMap::kExp, "exp"},
    {FeatureMap::kFavorPlus, "favor_plus"},
}};
constexpr std::array<EnumName<PositionEmbedding>, 3> kPositionNames = {{
    {PositionEmbedding::kLearned, "learned"},
    {PositionEmbedding::kSinusoidal, "sinusoidal"},
    {PositionEmbedding::kNone, "none"},
}};
constexpr std::array<EnumName<TokenizerKind>, 2> kTokenizerNames = {{
    {TokenizerKind::kByte, "byte"},
    {TokenizerKind::kSentencePiece, "sentencepiece"},
}};

template <typename Enum, size_t N>
std::string_view NameOf(const std::array<EnumName<Enum>, N>& names, Enum value) {
  for (const auto& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// Reads the fields of one config.json object, remembering which keys it consumed so that the
// rest can be reported as unknown. Every error names the source file, the field and the limit.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string_view source) : object_(object), source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field \"", field, "\": ", message));
  }

  // The value of `field`, or nullptr when absent.
  const Json* Find(absl::string_view field) {
    consumed_.insert(std::string(field));
    auto it = object_.find(std::string(field));
    return it == object_.end() ? nullptr : &*it;
  }

  absl::Status Int(absl::string_view field, int64_t min, int64_t max, bool required, int32_t& out) {
    const Json* value = Find(field);
    if (value == nullptr) {
      return required
                 ? Error(field, absl::StrCat("is required (an integer in [", min, ", ", max, "])"))
                 : absl::OkStatus();
    }
    int64_t v = 0;
    if (value->is_number_unsigned()) {
      const uint64_t u = value->get<uint64_t>();
      if (u > static_cast<uint64_t>(max)) return OutOfRange(field, *value, min, max);
      v = static_cast<int64_t>(u);
    } else if (value->is_number_integer()) {
      v = value->get<int64_t>();
    } else {
      return Error(field, absl::StrCat("must be an integer in [", min, ", ", max, "], got ",
                                       DescribeJson(*value)));
    }
    if (v < min || v > max) return OutOfRange(field, *value, min, max);
    out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }

  absl::Status Bool(absl::string_view field, bool& out) {
    const Json* value = Find(field);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_boolean()) {
      return Error(field, absl::StrCat("must be true or false, got ", DescribeJson(*value)));
    }
    out = value->get<bool>();
    return absl::OkStatus();
  }

  // A number in (0, 1].
  absl::Status Epsilon(absl::string_view field, double& out) {
    const Json* value = Find(field);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_number()) {
      return Error(field, absl::StrCat("must be a number in (0, 1], got ", DescribeJson(*value)));
    }
    const double v = value->get<double>();
    if (!(v > 0.0 && v <= 1.0)) {
      return Error(field, absl::StrCat("must be in (0, 1], got ", value->dump()));
    }
    out = v;
    return absl::OkStatus();
  }

  template <typename Enum, size_t N>
  absl::Status Choice(absl::string_view field, const std::array<EnumName<Enum>, N>& names,
                      Enum& out) {
    const Json* value = Find(field);
    if (value == nullptr) return absl::OkStatus();
    std::vector<std::string> quoted;
    for (const auto& entry : names)
      quoted.push_back(absl::StrCat("\"", std::string(entry.name), "\""));
    const std::string allowed = absl::StrJoin(quoted, ", ");
    if (!value->is_string()) {
      return Error(field, absl::StrCat("must be one of ", allowed, ", got ", DescribeJson(*value)));
    }
    const std::string text = value->get<std::string>();
    for (const auto& entry : names) {
      if (entry.name == text) {
        out = entry.value;
        return absl::OkStatus();
      }
    }
    return Error(field, absl::StrCat("must be one of ", allowed, ", got ", DescribeJson(*value)));
  }

  // Every key of the object that no reader asked for.
  absl::Status RejectUnknown() const {
    std::vector<std::string> unknown;
    for (const auto& [key, value] : object_.items()) {
      if (consumed_.count(key) == 0) unknown.push_back(absl::StrCat("\"", key, "\""));
    }
    if (unknown.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": unknown field", unknown.size() > 1 ? "s " : " ", absl::StrJoin(unknown, ", ")));
  }

 private:
  absl::Status OutOfRange(absl::string_view field, const Json& value, int64_t min,
                          int64_t max) const {
    return Error(field, absl::StrCat("must be in [", min, ", ", max, "], got ", value.dump()));
  }

  const Json& object_;
  std::string source_;
  std::set<std::string> consumed_;
};

absl::Status CheckCrossFields(const ModelConfig& c, FieldReader& reader, bool feature_dim_given) {
  if (static_cast<int64_t>(c.n_heads) * c.head_dim != c.d_model) {
    return reader.Error(
        "d_model",
        absl::StrCat("must equal n_heads * head_dim = ", c.n_heads, " * ", c.head_dim, " = ",
                     static_cast<int64_t>(c.n_heads) * c.head_dim, ", got ", c.d_model));
  }
  if (c.feature_map != FeatureMap::kFavorPlus && feature_dim_given && c.feature_dim != c.head_dim) {
    return reader.Error(
        "feature_dim", absl::StrCat("must equal head_dim (", c.head_dim, ") for feature_map \"",
                                    std::string(ToString(c.feature_map)), "\", got ", c.feature_dim,
                                    "; only favor_plus has its own feature count"));
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
       {std::pair<absl::string_view, TokenId>{"bos_token_id", c.bos_token_id},
        {"eos_token_id", c.eos_token_id}}) {
    if (id != -1 && (id < 0 || id >= c.vocab_size)) {
      return reader.Error(field, absl::StrCat("must be -1 (none) or in [0, vocab_size) = [0, ",
                                              c.vocab_size, "), got ", id));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::StateFloatsPerSlot() const {
  return int64_t{n_layers} * n_heads * feature_dim * (int64_t{head_dim} + 1);
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

  absl::Status status;
  auto check = [&](absl::Status s) {
    if (status.ok()) status = std::move(s);
  };
  check(reader.Int("vocab_size", 1, 1 << 20, /*required=*/true, c.vocab_size));
  check(reader.Int("d_model", 1, 65536, true, c.d_model));
  check(reader.Int("n_layers", 1, 1024, true, c.n_layers));
  check(reader.Int("n_heads", 1, 1024, true, c.n_heads));
  check(reader.Int("head_dim", 1, 4096, true, c.head_dim));
  check(reader.Int("d_ff", 1, 1 << 20, true, c.d_ff));
  const bool feature_dim_given = reader.Find("feature_dim") != nullptr;
  check(reader.Int("feature_dim", 1, 16384, false, c.feature_dim));
  check(reader.Choice("norm", kNormNames, c.norm));
  check(reader.Choice("activation", kActivationNames, c.activation));
  check(reader.Choice("feature_map", kFeatureMapNames, c.feature_map));
  check(reader.Choice("position", kPositionNames, c.position));
  check(reader.Int("max_position", 0, 1 << 24, false, c.max_position));
  check(reader.Bool("bias", c.bias));
  check(reader.Bool("tie_embeddings", c.tie_embeddings));
  check(reader.Epsilon("attention_eps", c.attention_eps));
  check(reader.Epsilon("layer_norm_eps", c.layer_norm_eps));
  check(reader.Choice("tokenizer", kTokenizerNames, c.tokenizer));
  check(reader.Int("bos_token_id", -1, (1 << 20) - 1, false, c.bos_token_id));
  check(reader.Int("eos_token_id", -1, (1 << 20) - 1, false, c.eos_token_id));
  if (!status.ok()) return status;
  if (absl::Status s = reader.RejectUnknown(); !s.ok()) return s;
  if (!feature_dim_given) c.feature_dim = c.head_dim;
  if (absl::Status s = CheckCrossFields(c, reader, feature_dim_given); !s.ok()) return s;
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  // Ordered so that the file reads in the order of config.h.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["architecture"] = c.architecture;
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["head_dim"] = c.head_dim;
  j["d_ff"] = c.d_ff;
  j["feature_dim"] = c.feature_dim;
  j["norm"] = ToString(c.norm);
  j["activation"] = ToString(c.activation);
  j["feature_map"] = ToString(c.feature_map);
  j["position"] = ToString(c.position);
  j["max_position"] = c.max_position;
  j["bias"] = c.bias;
  j["tie_embeddings"] = c.tie_embeddings;
  j["attention_eps"] = c.attention_eps;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["tokenizer"] = ToString(c.tokenizer);
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  return j.dump(2) + "\n";
}

std::string_view ToString(NormPlacement v) { return NameOf(kNormNames, v); }
std::string_view ToString(Activation v) { return NameOf(kActivationNames, v); }
std::string_view ToString(FeatureMap v) { return NameOf(kFeatureMapNames, v); }
std::string_view ToString(PositionEmbedding v) { return NameOf(kPositionNames, v); }
std::string_view ToString(TokenizerKind v) { return NameOf(kTokenizerNames, v); }

}  // namespace linserve
