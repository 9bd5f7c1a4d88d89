// ToProto(ModelConfig): GetModelInfo's description of a model — the single-block fields where
// they apply, and for every model its layer list, each layer's state bytes and the final norm.
// FromProto's constraint: each kind of GenerateRequest.constraint compiled, errors naming it.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/format/config.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/token_vocabulary.h"
#include "nlohmann/json.hpp"
#include "server/transport/convert.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

ModelConfig Parse(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump(), "config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : ModelConfig();
}

nlohmann::json Layer(int n_heads, int head_dim, int d_ff) {
  return {{"mixer", {{"kind", "linear_attention"}, {"n_heads", n_heads}, {"head_dim", head_dim}}},
          {"norm", {{"kind", "layer_norm"}}},
          {"mlp", {{"kind", "ffn"}, {"d_ff", d_ff}}}};
}

std::vector<std::pair<std::string, std::string>> Params(const v1::LayerComponent& component) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const v1::LayerParam& p : component.params()) out.emplace_back(p.name(), p.value());
  return out;
}

TEST(ConvertTest, ASingleBlockModelHasItsFieldsAndItsLayerList) {
  const ModelConfig config = TinyConfig();  // 2 layers of 4 heads × 8, d_ff 64, pre-norm
  v1::ModelInfo info;
  ToProto(config, &info);
  EXPECT_EQ(info.architecture(), "linear_transformer");
  EXPECT_EQ(info.vocab_size(), 260);
  EXPECT_EQ(info.d_model(), 32);
  EXPECT_EQ(info.n_layers(), 2);
  EXPECT_EQ(info.n_heads(), 4);
  EXPECT_EQ(info.head_dim(), 8);
  EXPECT_EQ(info.feature_dim(), 8);
  EXPECT_EQ(info.d_ff(), 64);
  EXPECT_EQ(info.feature_map(), "elu_plus_one");
  EXPECT_EQ(info.activation(), "gelu");
  EXPECT_EQ(info.norm(), "pre");
  EXPECT_EQ(info.position(), "sinusoidal");
  EXPECT_EQ(info.eos_token_id(), 257);

  ASSERT_EQ(info.layers_size(), 2);
  for (const v1::LayerInfo& layer : info.layers()) {
    EXPECT_EQ(layer.mixer().kind(), "linear_attention");
    EXPECT_THAT(Params(layer.mixer()),
                ElementsAre(Pair("n_heads", "4"), Pair("head_dim", "8"), Pair("feature_dim", "8"),
                            Pair("feature_map", "elu_plus_one"), Pair("eps", "1e-06"),
                            Pair("bias", "true")));
    EXPECT_EQ(layer.norm().kind(), "layer_norm");
    EXPECT_THAT(Params(layer.norm()), ElementsAre(Pair("eps", "1e-05")));
    EXPECT_EQ(layer.mlp().kind(), "ffn");
    EXPECT_THAT(Params(layer.mlp()),
                ElementsAre(Pair("d_ff", "64"), Pair("activation", "gelu"), Pair("bias", "true")));
    EXPECT_EQ(layer.state_bytes(), 4 * 8 * (8 + 1) * 4);  // per head S and z, fp32
  }
  ASSERT_TRUE(info.has_final_norm());
  EXPECT_EQ(info.final_norm().kind(), "layer_norm");
  EXPECT_THAT(Params(info.final_norm()), ElementsAre(Pair("eps", "1e-05")));
}

TEST(ConvertTest, AMixedModelHasOnlyItsLayerList) {
  nlohmann::json j = {{"vocab_size", 300},
                      {"d_model", 64},
                      {"layers", {Layer(4, 16, 128), Layer(2, 32, 96), Layer(1, 64, 128)}},
                      {"final_norm", {{"kind", "layer_norm"}, {"eps", 3e-6}}}};
  j["layers"][1]["mixer"]["feature_map"] = "favor_plus";
  j["layers"][1]["mixer"]["feature_dim"] = 5;
  j["layers"][1]["mixer"]["eps"] = 1.25e-7;
  j["layers"][2]["mlp"]["activation"] = "relu";
  j["layers"][2]["mixer"]["bias"] = false;
  const ModelConfig config = Parse(j);
  ASSERT_FALSE(config.IsSingleBlock());
  v1::ModelInfo info;
  ToProto(config, &info);
  EXPECT_EQ(info.n_layers(), 3);
  EXPECT_EQ(info.d_model(), 64);
  // The single-block fields do not describe this model.
  EXPECT_EQ(info.n_heads(), 0);
  EXPECT_EQ(info.head_dim(), 0);
  EXPECT_EQ(info.feature_dim(), 0);
  EXPECT_EQ(info.d_ff(), 0);
  EXPECT_EQ(info.feature_map(), "");
  EXPECT_EQ(info.activation(), "");
  EXPECT_EQ(info.norm(), "pre");

  ASSERT_EQ(info.layers_size(), 3);
  EXPECT_THAT(Params(info.layers(0).mixer()),
              ElementsAre(Pair("n_heads", "4"), Pair("head_dim", "16"), Pair("feature_dim", "16"),
                          Pair("feature_map", "elu_plus_one"), Pair("eps", "1e-06"),
                          Pair("bias", "true")));
  EXPECT_THAT(Params(info.layers(1).mixer()),
              ElementsAre(Pair("n_heads", "2"), Pair("head_dim", "32"), Pair("feature_dim", "5"),
                          Pair("feature_map", "favor_plus"), Pair("eps", "1.25e-07"),
                          Pair("bias", "true")));
  EXPECT_THAT(Params(info.layers(1).mlp()),
              ElementsAre(Pair("d_ff", "96"), Pair("activation", "gelu"), Pair("bias", "true")));
  EXPECT_THAT(Params(info.layers(2).mixer()),
              ElementsAre(Pair("n_heads", "1"), Pair("head_dim", "64"), Pair("feature_dim", "64"),
                          Pair("feature_map", "elu_plus_one"), Pair("eps", "1e-06"),
                          Pair("bias", "false")));
  EXPECT_THAT(Params(info.layers(2).mlp()),
              ElementsAre(Pair("d_ff", "128"), Pair("activation", "relu"), Pair("bias", "true")));
  // Each layer's slice, in bytes: n_heads · feature_dim · (head_dim + 1) floats.
  EXPECT_EQ(info.layers(0).state_bytes(), 4 * 16 * 17 * 4);
  EXPECT_EQ(info.layers(1).state_bytes(), 2 * 5 * 33 * 4);
  EXPECT_EQ(info.layers(2).state_bytes(), 1 * 64 * 65 * 4);
  EXPECT_EQ(info.layers(0).state_bytes() + info.layers(1).state_bytes() +
                info.layers(2).state_bytes(),
            config.StateFloatsPerSlot() * 4);
  ASSERT_TRUE(info.has_final_norm());
  EXPECT_THAT(Params(info.final_norm()), ElementsAre(Pair("eps", "3e-06")));
}

TEST(ConvertTest, APostNormModelHasNoFinalNorm) {
  ModelConfig config = TinyConfig();
  config.norm = NormPlacement::kPost;
  v1::ModelInfo info;
  ToProto(config, &info);
  EXPECT_EQ(info.norm(), "post");
  EXPECT_EQ(info.layers_size(), 2);
  EXPECT_FALSE(info.has_final_norm());
}

class ConvertConstraintTest : public ::testing::Test {
 protected:
  absl::StatusOr<GenerateRequest> Convert(const v1::Constraint& constraint) {
    v1::GenerateRequest in;
    in.set_text("a");
    *in.mutable_constraint() = constraint;
    return FromProto(in, tokenizer_, RequestLimits(), cache_, "id");
  }

  const ByteTokenizer tokenizer_{260};
  ConstraintCache cache_{TokenVocabulary::Create(tokenizer_, 257), ConstraintLimits()};
};

TEST_F(ConvertConstraintTest, EachKindBecomesItsSpec) {
  v1::Constraint c;
  EXPECT_FALSE(FromProto(c).has_value());
  c.set_json_schema(R"({"type": "integer"})");
  EXPECT_EQ(FromProto(c), (ConstraintSpec{ConstraintKind::kJsonSchema, R"({"type": "integer"})"}));
  c.mutable_json_object();
  EXPECT_EQ(FromProto(c), (ConstraintSpec{ConstraintKind::kJsonObject, ""}));
  c.set_regex("[ab]+");
  EXPECT_EQ(FromProto(c), (ConstraintSpec{ConstraintKind::kRegex, "[ab]+"}));
  c.set_grammar("root ::= \"x\"");
  EXPECT_EQ(FromProto(c), (ConstraintSpec{ConstraintKind::kGrammar, "root ::= \"x\""}));
}

TEST_F(ConvertConstraintTest, TheRequestCarriesItCompiled) {
  absl::StatusOr<GenerateRequest> none = Convert(v1::Constraint());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->constraint, nullptr);

  v1::Constraint c;
  c.set_json_schema(R"({"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"], "additionalProperties": false})");
  absl::StatusOr<GenerateRequest> schema = Convert(c);
  ASSERT_TRUE(schema.ok()) << schema.status();
  ASSERT_NE(schema->constraint, nullptr);
  EXPECT_EQ(schema->constraint->spec(), *FromProto(c));
  c.mutable_json_object();
  absl::StatusOr<GenerateRequest> object = Convert(c);
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_NE(object->constraint, nullptr);
  EXPECT_EQ(object->constraint->spec().kind, ConstraintKind::kJsonObject);
  c.set_regex("(yes|no)");
  absl::StatusOr<GenerateRequest> regex = Convert(c);
  ASSERT_TRUE(regex.ok()) << regex.status();
  ASSERT_NE(regex->constraint, nullptr);
  EXPECT_EQ(regex->constraint->spec(), *FromProto(c));
  c.set_grammar("root ::= [0-9]+");
  absl::StatusOr<GenerateRequest> grammar = Convert(c);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  ASSERT_NE(grammar->constraint, nullptr);
  EXPECT_EQ(grammar->constraint->gbnf(), "root ::= [0-9]+");
  // Compiled once: the same text is the same compiled constraint.
  EXPECT_EQ(Convert(c)->constraint, grammar->constraint);
}

TEST_F(ConvertConstraintTest, ErrorsNameTheField) {
  v1::Constraint c;
  c.set_json_schema(R"({"type": "string", "format": "email"})");
  absl::Status status = Convert(c).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("constraint.json_schema: "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("format"));
  c.set_regex("(a");
  status = Convert(c).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("constraint.regex: "));
  c.set_grammar("start ::= \"a\"");
  status = Convert(c).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("constraint.grammar: "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("root"));
  c.set_regex(std::string(ConstraintLimits().max_text_bytes + 1, 'a'));
  status = Convert(c).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith("constraint.regex: "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_text_bytes"));
}

// logit_bias: the map's entries sorted by token (a map's order is unspecified); more than 300
// entries are refused before any is copied.
TEST_F(ConvertConstraintTest, LogitBiasIsSortedByTokenAndBounded) {
  v1::GenerateRequest in;
  in.set_text("a");
  auto& bias = *in.mutable_sampling()->mutable_logit_bias();
  bias[200] = -100.0f;
  bias[3] = 1.5f;
  bias[77] = 0.25f;
  absl::StatusOr<GenerateRequest> out = FromProto(in, tokenizer_, RequestLimits(), cache_, "id");
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::pair<TokenId, float>> got;
  for (const LogitBias& entry : out->sampling.logit_bias) got.push_back({entry.token, entry.bias});
  EXPECT_EQ(got, (std::vector<std::pair<TokenId, float>>{{3, 1.5f}, {77, 0.25f}, {200, -100.0f}}));
  for (int t = 0; t <= kMaxLogitBias; ++t) bias[1000 + t] = 1.0f;
  const absl::Status status = FromProto(in, tokenizer_, RequestLimits(), cache_, "id").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              StartsWith("sampling.logit_bias: 304 entries exceed the limit of 300"));
}

}  // namespace
}  // namespace linserve
