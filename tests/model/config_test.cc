#include "model/format/config.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::string_view kSource = "models/x/config.json";

nlohmann::json ValidJson() {
  return {
      {"architecture", "linear_transformer"},
      {"vocab_size", 300},
      {"d_model", 64},
      {"n_layers", 2},
      {"n_heads", 4},
      {"head_dim", 16},
      {"d_ff", 128},
  };
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
  return ParseModelConfig(j.dump(), kSource);
}

// Parses `j` expecting INVALID_ARGUMENT; returns the message.
std::string ParseError(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = Parse(j);
  EXPECT_FALSE(c.ok()) << "accepted " << j.dump();
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(kSource));
  return std::string(c.status().message());
}

nlohmann::json With(std::string_view key, nlohmann::json value) {
  nlohmann::json j = ValidJson();
  j[std::string(key)] = std::move(value);
  return j;
}

nlohmann::json Without(std::string_view key) {
  nlohmann::json j = ValidJson();
  j.erase(std::string(key));
  return j;
}

TEST(ConfigTest, MinimalConfigGetsTheDocumentedDefaults) {
  absl::StatusOr<ModelConfig> c = Parse(ValidJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 300);
  EXPECT_EQ(c->d_model, 64);
  EXPECT_EQ(c->feature_dim, 16);  // head_dim
  EXPECT_EQ(c->norm, NormPlacement::kPre);
  EXPECT_EQ(c->activation, Activation::kGelu);
  EXPECT_EQ(c->feature_map, FeatureMap::kEluPlusOne);
  EXPECT_EQ(c->position, PositionEmbedding::kSinusoidal);
  EXPECT_EQ(c->max_position, 0);
  EXPECT_TRUE(c->bias);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_DOUBLE_EQ(c->attention_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-5);
  EXPECT_EQ(c->tokenizer, TokenizerKind::kByte);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_id, -1);
  EXPECT_EQ(c->StateFloatsPerSlot(), 2 * 4 * 16 * 17);
}

TEST(ConfigTest, EveryFieldRoundTripsThroughJson) {
  ModelConfig c;
  c.vocab_size = 1000;
  c.d_model = 96;
  c.n_layers = 3;
  c.n_heads = 3;
  c.head_dim = 32;
  c.d_ff = 200;
  c.feature_dim = 48;
  c.norm = NormPlacement::kPost;
  c.activation = Activation::kGeluTanh;
  c.feature_map = FeatureMap::kFavorPlus;
  c.position = PositionEmbedding::kLearned;
  c.max_position = 512;
  c.bias = false;
  c.tie_embeddings = false;
  c.attention_eps = 1.2345678901234567e-7;
  c.layer_norm_eps = 3e-6;
  c.tokenizer = TokenizerKind::kSentencePiece;
  c.bos_token_id = 1;
  c.eos_token_id = 999;
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(c), kSource);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ModelConfigToJson(*back), ModelConfigToJson(c));
  EXPECT_EQ(back->feature_dim, 48);
  EXPECT_EQ(back->norm, NormPlacement::kPost);
  EXPECT_EQ(back->activation, Activation::kGeluTanh);
  EXPECT_EQ(back->feature_map, FeatureMap::kFavorPlus);
  EXPECT_EQ(back->position, PositionEmbedding::kLearned);
  EXPECT_EQ(back->max_position, 512);
  EXPECT_FALSE(back->bias);
  EXPECT_FALSE(back->tie_embeddings);
  EXPECT_EQ(back->attention_eps, c.attention_eps);  // bit-exact
  EXPECT_EQ(back->layer_norm_eps, c.layer_norm_eps);
  EXPECT_EQ(back->tokenizer, TokenizerKind::kSentencePiece);
  EXPECT_EQ(back->bos_token_id, 1);
  EXPECT_EQ(back->eos_token_id, 999);
  EXPECT_EQ(back->StateFloatsPerSlot(), 3 * 3 * 48 * 33);
}

TEST(ConfigTest, EnumNamesRoundTrip) {
  for (auto v : {Activation::kGelu, Activation::kGeluTanh, Activation::kRelu}) {
    absl::StatusOr<ModelConfig> c = Parse(With("activation", std::string(ToString(v))));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->activation, v);
  }
  for (auto v :
       {FeatureMap::kEluPlusOne, FeatureMap::kRelu, FeatureMap::kExp, FeatureMap::kFavorPlus}) {
    absl::StatusOr<ModelConfig> c = Parse(With("feature_map", std::string(ToString(v))));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->feature_map, v);
  }
  for (auto v : {PositionEmbedding::kSinusoidal, PositionEmbedding::kNone}) {
    absl::StatusOr<ModelConfig> c = Parse(With("position", std::string(ToString(v))));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->position, v);
  }
  EXPECT_EQ(ToString(NormPlacement::kPost), "post");
  EXPECT_EQ(ToString(TokenizerKind::kSentencePiece), "sentencepiece");
  EXPECT_EQ(ToString(TokenizerKind::kGpt2Bpe), "gpt2_bpe");
  EXPECT_EQ(ToString(TokenizerKind::kNone), "none");
  // Without a tokenizer no byte ids are needed: any vocabulary size is one.
  nlohmann::json small = With("tokenizer", "none");
  small["vocab_size"] = 3;
  absl::StatusOr<ModelConfig> none = Parse(small);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->tokenizer, TokenizerKind::kNone);
}

TEST(ConfigTest, RejectsTextThatIsNotAJsonObject) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig("{\"vocab_size\": 3,", kSource);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr(kSource), HasSubstr("not valid JSON")));
  c = ParseModelConfig("[1, 2]", kSource);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("must be a JSON object, got array"));
}

TEST(ConfigTest, RejectsDuplicateKeys) {
  std::string text = ValidJson().dump();
  text.insert(1, "\"d_model\": 32, ");
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text, kSource);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("duplicate key \"d_model\""));
}

TEST(ConfigTest, RejectsUnknownFields) {
  EXPECT_THAT(ParseError(With("hidden_size", 64)), HasSubstr("unknown field \"hidden_size\""));
}

TEST(ConfigTest, ArchitectureIsOptionalButExact) {
  EXPECT_THAT(ParseError(With("architecture", "Linear_Transformer")),
              AllOf(HasSubstr("\"architecture\""), HasSubstr("\"linear_transformer\"")));
  EXPECT_THAT(ParseError(With("architecture", 1)), HasSubstr("\"architecture\""));
  absl::StatusOr<ModelConfig> c = Parse(Without("architecture"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "linear_transformer");
}

TEST(ConfigTest, RequiredIntegersMustBePresent) {
  for (std::string_view field :
       {"vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "d_ff"}) {
    EXPECT_THAT(
        ParseError(Without(field)),
        AllOf(HasSubstr(absl::StrCat("\"", std::string(field), "\"")), HasSubstr("is required")));
  }
}

TEST(ConfigTest, IntegersAreTypeChecked) {
  EXPECT_THAT(ParseError(With("n_layers", "2")),
              AllOf(HasSubstr("\"n_layers\""), HasSubstr("must be an integer in [1, 1024]"),
                    HasSubstr("got string")));
  EXPECT_THAT(ParseError(With("n_layers", 2.5)), HasSubstr("got number 2.5"));
  EXPECT_THAT(ParseError(With("n_layers", true)), HasSubstr("got boolean"));
}

TEST(ConfigTest, IntegersAreRangeChecked) {
  struct Case {
    std::string_view field;
    int64_t bad;
    std::string_view limit;
  };
  for (const Case& c :
       {Case{"vocab_size", 0, "[1, 1048576]"}, Case{"vocab_size", (1 << 20) + 1, "[1, 1048576]"},
        Case{"d_model", 65537, "[1, 65536]"}, Case{"n_layers", 0, "[1, 1024]"},
        Case{"n_layers", 1025, "[1, 1024]"}, Case{"n_heads", -1, "[1, 1024]"},
        Case{"head_dim", 4097, "[1, 4096]"}, Case{"d_ff", 0, "[1, 1048576]"},
        Case{"feature_dim", 0, "[1, 16384]"}, Case{"max_position", -1, "[0, 16777216]"},
        Case{"bos_token_id", -2, "[-1, 1048575]"}}) {
    EXPECT_THAT(ParseError(With(c.field, c.bad)),
                AllOf(HasSubstr(absl::StrCat("\"", std::string(c.field), "\"")), HasSubstr(c.limit),
                      HasSubstr(absl::StrCat("got ", c.bad))));
  }
  // Beyond int64 and beyond int32: still a clean range error, never a wrap-around.
  EXPECT_THAT(ParseError(With("d_ff", uint64_t{18446744073709551615u})),
              HasSubstr("got 18446744073709551615"));
  EXPECT_THAT(ParseError(With("d_ff", int64_t{1} << 32)), HasSubstr("[1, 1048576]"));
}

TEST(ConfigTest, ChoicesAreChecked) {
  EXPECT_THAT(
      ParseError(With("norm", "middle")),
      AllOf(HasSubstr("\"norm\""), HasSubstr("\"pre\", \"post\""), HasSubstr("got string \"middle\"")));
  EXPECT_THAT(ParseError(With("activation", "swish")), HasSubstr("\"gelu_tanh\""));
  EXPECT_THAT(ParseError(With("feature_map", "softmax")), HasSubstr("\"favor_plus\""));
  EXPECT_THAT(ParseError(With("position", "rope")), HasSubstr("\"sinusoidal\""));
  EXPECT_THAT(ParseError(With("tokenizer", 1)),
              AllOf(HasSubstr("\"tokenizer\""), HasSubstr("got integer 1")));
}

TEST(ConfigTest, HostileValuesGiveShortMessages) {
  const std::string huge(100000, 'x');
  const std::string message = ParseError(With("norm", huge));
  EXPECT_LT(message.size(), 300u);
  EXPECT_THAT(message, HasSubstr("xxx..."));
  EXPECT_THAT(ParseError(With("d_ff", nlohmann::json::array({1, 2}))), HasSubstr("got array"));
  std::string deep = ValidJson().dump();
  deep.insert(1, "\"x\": " + std::string(100, '[') + std::string(100, ']') + ", ");
  EXPECT_THAT(ParseModelConfig(deep, kSource).status().message(),
              HasSubstr("nested deeper than 16 levels"));
}

TEST(ConfigTest, BooleansAreTypeChecked) {
  EXPECT_THAT(ParseError(With("bias", 1)),
              AllOf(HasSubstr("\"bias\""), HasSubstr("true or false")));
  EXPECT_THAT(ParseError(With("tie_embeddings", "yes")), HasSubstr("\"tie_embeddings\""));
}

TEST(ConfigTest, EpsilonsAreRangeChecked) {
  EXPECT_THAT(ParseError(With("attention_eps", 0.0)),
              AllOf(HasSubstr("\"attention_eps\""), HasSubstr("(0, 1]")));
  EXPECT_THAT(ParseError(With("layer_norm_eps", 1.5)), HasSubstr("\"layer_norm_eps\""));
  EXPECT_THAT(ParseError(With("attention_eps", -1e-6)), HasSubstr("(0, 1]"));
  EXPECT_THAT(ParseError(With("attention_eps", "1e-6")), HasSubstr("got string"));
  absl::StatusOr<ModelConfig> c = Parse(With("attention_eps", 1));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention_eps, 1.0);
}

TEST(ConfigTest, DModelMustEqualHeadsTimesHeadDim) {
  EXPECT_THAT(ParseError(With("d_model", 60)),
              AllOf(HasSubstr("\"d_model\""), HasSubstr("n_heads * head_dim = 4 * 16 = 64"),
                    HasSubstr("got 60")));
}

TEST(ConfigTest, FeatureDimDiffersFromHeadDimOnlyForFavorPlus) {
  EXPECT_THAT(ParseError(With("feature_dim", 32)),
              AllOf(HasSubstr("\"feature_dim\""), HasSubstr("must equal head_dim (16)")));
  nlohmann::json j = With("feature_map", "favor_plus");
  j["feature_dim"] = 32;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->feature_dim, 32);
  EXPECT_EQ(c->StateFloatsPerSlot(), 2 * 4 * 32 * 17);
  c = Parse(With("feature_dim", 16));
  ASSERT_TRUE(c.ok()) << c.status();
}

TEST(ConfigTest, MaxPositionIsRequiredExactlyForLearnedPositions) {
  EXPECT_THAT(ParseError(With("position", "learned")),
              AllOf(HasSubstr("\"max_position\""), HasSubstr("required")));
  EXPECT_THAT(ParseError(With("max_position", 128)),
              AllOf(HasSubstr("\"max_position\""), HasSubstr("\"sinusoidal\"")));
  nlohmann::json j = With("position", "learned");
  j["max_position"] = 128;
  ASSERT_TRUE(Parse(j).ok());
}

TEST(ConfigTest, ByteTokenizerNeedsAllByteIds) {
  EXPECT_THAT(
      ParseError(With("vocab_size", 255)),
      AllOf(HasSubstr("\"vocab_size\""), HasSubstr("at least 256"), HasSubstr("byte tokenizer")));
  nlohmann::json j = With("vocab_size", 100);
  j["tokenizer"] = "sentencepiece";
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ConfigTest, SpecialTokenIdsMustBeInTheVocabulary) {
  EXPECT_THAT(ParseError(With("eos_token_id", 300)),
              AllOf(HasSubstr("\"eos_token_id\""), HasSubstr("[0, 300)"), HasSubstr("got 300")));
  EXPECT_THAT(ParseError(With("bos_token_id", -5)), HasSubstr("\"bos_token_id\""));
  absl::StatusOr<ModelConfig> c = Parse(With("eos_token_id", 299));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_token_id, 299);
}

}  // namespace
}  // namespace linserve
