// config.json's "layers": the layer list, its refusals, and the state layout it implies.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/format/config.h"
#include "model/format/session_state.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kSource = "models/x/config.json";

// The single-block config that config_test.cc starts from.
nlohmann::json SingleBlockJson() {
  return {{"vocab_size", 300}, {"d_model", 64},  {"n_layers", 2},
          {"n_heads", 4},      {"head_dim", 16}, {"d_ff", 128}};
}

nlohmann::json Layer(int n_heads, int head_dim) {
  return {{"mixer", {{"kind", "linear_attention"}, {"n_heads", n_heads}, {"head_dim", head_dim}}},
          {"norm", {{"kind", "layer_norm"}}},
          {"mlp", {{"kind", "ffn"}, {"d_ff", 128}}}};
}

// Layers with the single-block config's defaults spelled out nowhere: the kinds' defaults.
nlohmann::json LayersJson() {
  return {{"vocab_size", 300}, {"d_model", 64}, {"layers", {Layer(4, 16), Layer(4, 16)}}};
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
  return ParseModelConfig(j.dump(), kSource);
}

std::string ParseError(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = Parse(j);
  EXPECT_FALSE(c.ok()) << "accepted " << j.dump();
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(kSource));
  return std::string(c.status().message());
}

TEST(LayerConfigTest, TheSingleBlockSchemaIsAListOfIdenticalLayers) {
  absl::StatusOr<ModelConfig> c = Parse(SingleBlockJson());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->layers.empty());
  EXPECT_TRUE(c->IsSingleBlock());
  const std::vector<LayerSpec> layers = c->LayerList();
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0], layers[1]);
  EXPECT_EQ(layers[0].mixer.kind, "linear_attention");
  EXPECT_EQ(layers[0].mixer.params.Int("feature_dim"), 16);
  EXPECT_EQ(layers[0].mixer.params.Number("eps"), 1e-6);
  EXPECT_EQ(layers[0].norm.kind, "layer_norm");
  EXPECT_EQ(layers[0].mlp.params.Choice("activation"), "gelu");
  EXPECT_EQ(c->FinalNorm(), layers[0].norm);
}

TEST(LayerConfigTest, LayersLikeTheSingleBlockFillItsFields) {
  absl::StatusOr<ModelConfig> single = Parse(SingleBlockJson());
  absl::StatusOr<ModelConfig> listed = Parse(LayersJson());
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->layers.size(), 2u);
  EXPECT_TRUE(listed->IsSingleBlock());
  EXPECT_EQ(listed->n_layers, 2);
  EXPECT_EQ(listed->n_heads, 4);
  EXPECT_EQ(listed->head_dim, 16);
  EXPECT_EQ(listed->feature_dim, 16);
  EXPECT_EQ(listed->d_ff, 128);
  EXPECT_EQ(listed->LayerList(), single->LayerList());
  EXPECT_EQ(listed->FinalNorm(), single->FinalNorm());
  EXPECT_EQ(listed->StateFloatsPerSlot(), single->StateFloatsPerSlot());
}

TEST(LayerConfigTest, DifferentLayersLeaveTheSingleBlockSizesZero) {
  nlohmann::json j = LayersJson();
  j["layers"][1] = Layer(2, 32);
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->IsSingleBlock());
  EXPECT_EQ(c->n_heads, 0);
  EXPECT_EQ(c->head_dim, 0);
  EXPECT_EQ(c->d_ff, 0);
}

TEST(LayerConfigTest, StateOffsetsConcatenateTheSlices) {
  nlohmann::json j = LayersJson();
  j["layers"] = {Layer(4, 16), Layer(2, 8), Layer(1, 64)};
  j["layers"][1]["mixer"]["feature_map"] = "favor_plus";
  j["layers"][1]["mixer"]["feature_dim"] = 5;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t a = 4 * 16 * 17;
  const int64_t b = 2 * 5 * 9;
  const int64_t d = 1 * 64 * 65;
  EXPECT_THAT(c->StateOffsets(), ElementsAre(0, a, a + b, a + b + d));
  EXPECT_EQ(c->StateFloatsPerSlot(), a + b + d);
}

TEST(LayerConfigTest, RoundTripsThroughJson) {
  nlohmann::json j = LayersJson();
  j["norm"] = "post";
  j["layers"][1] = Layer(2, 32);
  j["layers"][1]["mixer"]["bias"] = false;
  j["layers"][1]["mlp"]["activation"] = "relu";
  j["final_norm"] = {{"kind", "layer_norm"}, {"eps", 3e-6}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), kSource);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ModelConfigToJson(*c);
  EXPECT_EQ(ModelConfigToJson(*back), ModelConfigToJson(*c));
  EXPECT_EQ(back->layers, c->layers);
  EXPECT_EQ(back->final_norm.params.Number("eps"), 3e-6);
}

TEST(LayerConfigTest, RefusalsNameTheField) {
  nlohmann::json j = LayersJson();
  j["layers"] = {Layer(4, 16), Layer(4, 16), Layer(4, 16), Layer(4, 16)};
  j["layers"][3]["mixer"]["kind"] = "softmax_attention";
  const std::string kind_error = ParseError(j);
  EXPECT_THAT(kind_error,
              HasSubstr("field \"layers[3].mixer.kind\": must be one of \"linear_attention\", "));
  EXPECT_THAT(kind_error, HasSubstr(", got string \"softmax_attention\""));

  j = LayersJson();
  j["layers"][1]["mixer"]["window"] = 64;
  EXPECT_THAT(ParseError(j), HasSubstr("unknown field \"layers[1].mixer.window\""));

  j = LayersJson();
  j["layers"][0]["mixer"]["n_heads"] = 0;
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers[0].mixer.n_heads\": must be in [1, 1024]"));

  j = LayersJson();
  j["layers"][0]["mixer"].erase("head_dim");
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers[0].mixer.head_dim\": is required"));

  j = LayersJson();
  j["layers"][1]["mixer"]["feature_dim"] = 8;
  EXPECT_THAT(ParseError(j),
              HasSubstr("field \"layers[1].mixer.feature_dim\": must equal head_dim (16)"));

  j = LayersJson();
  j["layers"][0]["norm"]["eps"] = 0;
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers[0].norm.eps\": must be in (0, 1]"));

  j = LayersJson();
  j["layers"][0]["mlp"]["activation"] = "swish";
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers[0].mlp.activation\": must be one of"));

  j = LayersJson();
  j["layers"][0].erase("mlp");
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers[0].mlp\": is required"));

  j = LayersJson();
  j["layers"][0]["extra"] = {};
  EXPECT_THAT(ParseError(j), HasSubstr("unknown field \"layers[0].extra\""));

  j = LayersJson();
  j["layers"] = nlohmann::json::array();
  EXPECT_THAT(ParseError(j), HasSubstr("field \"layers\": must be an array of 1 to 1024"));

  j = LayersJson();
  j["n_heads"] = 4;
  EXPECT_THAT(ParseError(j), HasSubstr("field \"n_heads\": belongs in each layer"));

  j = LayersJson();
  j["n_layers"] = 3;
  EXPECT_THAT(ParseError(j), HasSubstr("field \"n_layers\": must equal the number of \"layers\""));

  j = LayersJson();
  j["final_norm"] = {{"kind", "rms"}};
  EXPECT_THAT(ParseError(j), HasSubstr("field \"final_norm.kind\": must be one of"));

  j = SingleBlockJson();
  j["final_norm"] = {{"kind", "layer_norm"}};
  EXPECT_THAT(ParseError(j), HasSubstr("unknown field \"final_norm\""));
}

TEST(SessionStateTest, ProblemsAreLocatedInTheirLayersSlice) {
  nlohmann::json j = LayersJson();
  j["layers"] = {Layer(4, 16), Layer(2, 8)};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t first = 4 * 16 * 17;
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.5f);
  EXPECT_TRUE(ValidateSessionState(*c, 10, state, 1e18f).ok());

  // Layer 1, head 1, z[3]: the slice's second head starts at 8 · 9 = 72; z after S (8 × 8).
  const int64_t index = first + 72 + 64 + 3;
  state[static_cast<size_t>(index)] = -1.0f;
  absl::Status s = ValidateSessionState(*c, 10, state, 1e18f);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("state[", index,
                                                  "] (layer 1, head 1, z[3]): -1 is negative")));
  state[static_cast<size_t>(index)] = 0.5f;
  EXPECT_THAT(ValidateSessionState(*c, 0, state, 1e18f).message(),
              HasSubstr("state[0]: 0.5 at position 0, where the state must be the initial one"));
}

}  // namespace
}  // namespace linserve
