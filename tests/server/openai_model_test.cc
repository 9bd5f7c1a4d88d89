// OpenAiModelJson: GET /v1/models' model object carries OpenAI's fields and, as extensions, the
// layer list (components as config.json writes them), each layer's state bytes, the state bytes
// per session and the final norm.
#include "server/transport/openai_model.h"

#include <utility>

#include "gtest/gtest.h"
#include "model/format/config.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using nlohmann::json;

TEST(OpenAiModelTest, ASingleBlockModel) {
  const json model = OpenAiModelJson("tiny", 1700000000, TinyConfig());
  EXPECT_EQ(model["id"], "tiny");
  EXPECT_EQ(model["object"], "model");
  EXPECT_EQ(model["created"], 1700000000);
  EXPECT_EQ(model["owned_by"], "linserve");
  const int64_t layer_bytes = 4 * 8 * (8 + 1) * 4;
  EXPECT_EQ(model["state_bytes_per_session"], 2 * layer_bytes);
  ASSERT_EQ(model["layers"].size(), 2u);
  const json layer = {{"mixer",
                       {{"kind", "linear_attention"},
                        {"n_heads", 4},
                        {"head_dim", 8},
                        {"feature_dim", 8},
                        {"feature_map", "elu_plus_one"},
                        {"eps", 1e-6},
                        {"bias", true}}},
                      {"norm", {{"kind", "layer_norm"}, {"eps", 1e-5}}},
                      {"mlp",
                       {{"kind", "ffn"}, {"d_ff", 64}, {"activation", "gelu"}, {"bias", true}}},
                      {"state_bytes", layer_bytes}};
  EXPECT_EQ(model["layers"][0], layer) << model.dump();
  EXPECT_EQ(model["layers"][1], layer);
  EXPECT_EQ(model["final_norm"], json({{"kind", "layer_norm"}, {"eps", 1e-5}}));
}

TEST(OpenAiModelTest, AMixedPostNormModel) {
  ModelConfig c = TinyConfig();
  c.norm = NormPlacement::kPost;
  c.layers = c.LayerList();
  c.layers[1].mixer.params.Set("n_heads", int64_t{2});
  c.layers[1].mixer.params.Set("head_dim", int64_t{16});
  c.layers[1].mixer.params.Set("feature_dim", int64_t{16});
  c.layers[1].mlp.params.Set("activation", std::string("relu"));
  c.final_norm = c.layers.back().norm;
  absl::StatusOr<ModelConfig> config = ParseModelConfig(ModelConfigToJson(c), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_FALSE(config->IsSingleBlock());

  const json model = OpenAiModelJson("mixed", 1, *config);
  ASSERT_EQ(model["layers"].size(), 2u);
  EXPECT_EQ(model["layers"][0]["mixer"]["n_heads"], 4);
  EXPECT_EQ(model["layers"][0]["mlp"]["activation"], "gelu");
  EXPECT_EQ(model["layers"][0]["state_bytes"], 4 * 8 * 9 * 4);
  EXPECT_EQ(model["layers"][1]["mixer"]["kind"], "linear_attention");
  EXPECT_EQ(model["layers"][1]["mixer"]["n_heads"], 2);
  EXPECT_EQ(model["layers"][1]["mixer"]["head_dim"], 16);
  EXPECT_EQ(model["layers"][1]["mlp"]["activation"], "relu");
  EXPECT_EQ(model["layers"][1]["state_bytes"], 2 * 16 * 17 * 4);
  EXPECT_EQ(model["state_bytes_per_session"], (4 * 8 * 9 + 2 * 16 * 17) * 4);
  EXPECT_EQ(model["state_bytes_per_session"], config->StateFloatsPerSlot() * 4);
  // A post-norm model has no final norm.
  EXPECT_FALSE(model.contains("final_norm"));
}

}  // namespace
}  // namespace linserve
