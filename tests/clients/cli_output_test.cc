// linserve-cli model's text: the single-block lines only where they describe the model, one
// line per layer with its components and state bytes, and the final norm.
#include "client/cli/output.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void SetComponent(v1::LayerComponent* component, const std::string& kind,
                  const std::vector<std::pair<std::string, std::string>>& params) {
  component->set_kind(kind);
  for (const auto& [name, value] : params) {
    v1::LayerParam* p = component->add_params();
    p->set_name(name);
    p->set_value(value);
  }
}

v1::LayerInfo* AddLayer(v1::ModelInfo& m, const std::string& n_heads, int64_t state_bytes) {
  v1::LayerInfo* layer = m.add_layers();
  SetComponent(layer->mutable_mixer(), "linear_attention",
               {{"n_heads", n_heads}, {"head_dim", "8"}});
  SetComponent(layer->mutable_norm(), "layer_norm", {{"eps", "1e-05"}});
  SetComponent(layer->mutable_mlp(), "ffn", {{"d_ff", "64"}, {"activation", "gelu"}});
  layer->set_state_bytes(state_bytes);
  return layer;
}

TEST(CliOutputTest, ASingleBlockModelKeepsItsLinesAndListsItsLayers) {
  v1::GetModelInfoResponse info;
  v1::ModelInfo& m = *info.mutable_model();
  m.set_n_layers(2);
  m.set_n_heads(4);
  m.set_head_dim(8);
  m.set_d_ff(64);
  m.set_feature_dim(8);
  m.set_feature_map("elu_plus_one");
  m.set_activation("gelu");
  m.set_norm("pre");
  AddLayer(m, "4", 1152);
  AddLayer(m, "4", 1152);
  SetComponent(m.mutable_final_norm(), "layer_norm", {{"eps", "1e-05"}});
  info.set_state_bytes_per_session(2304);
  const std::string text = FormatModelInfo(info);
  EXPECT_THAT(text,
              HasSubstr("\nheads: 4 x 8\nd_ff: 64\nfeature map: elu_plus_one (8 features)\n"));
  EXPECT_THAT(text, HasSubstr("\nactivation: gelu\n"));
  EXPECT_THAT(text, HasSubstr("\nlayer 0: mixer linear_attention(n_heads=4, head_dim=8); norm "
                              "layer_norm(eps=1e-05); mlp ffn(d_ff=64, activation=gelu); state "
                              "1152 bytes\nlayer 1: mixer linear_attention(n_heads=4, "));
  EXPECT_THAT(text, HasSubstr("\nfinal norm: layer_norm(eps=1e-05)\n"));
  EXPECT_THAT(text, HasSubstr("\nstate bytes per session: 2304\n"));
}

TEST(CliOutputTest, AMixedModelShowsItsLayersInsteadOfTheSingleBlockLines) {
  v1::GetModelInfoResponse info;
  v1::ModelInfo& m = *info.mutable_model();
  m.set_n_layers(2);
  m.set_norm("post");
  AddLayer(m, "4", 1152);
  AddLayer(m, "2", 576);
  const std::string text = FormatModelInfo(info);
  EXPECT_THAT(text, Not(HasSubstr("heads:")));
  EXPECT_THAT(text, Not(HasSubstr("d_ff:")));
  EXPECT_THAT(text, Not(HasSubstr("feature map:")));
  EXPECT_THAT(text, Not(HasSubstr("activation:")));
  EXPECT_THAT(text, HasSubstr("\nnorm: post\n"));
  EXPECT_THAT(text, HasSubstr("\nlayer 0: mixer linear_attention(n_heads=4, head_dim=8);"));
  EXPECT_THAT(text, HasSubstr("\nlayer 1: mixer linear_attention(n_heads=2, head_dim=8); norm "
                              "layer_norm(eps=1e-05); mlp ffn(d_ff=64, activation=gelu); state "
                              "576 bytes\n"));
  EXPECT_THAT(text, Not(HasSubstr("final norm")));
}

}  // namespace
}  // namespace linserve::cli
