// A config.json that spells its layers out as "layers" gives the same model as the single-block
// schema it equals: the CPU backend's logits and states are bitwise the same.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

// `config` with its layers given as "layers", through config.json text.
ModelConfig Listed(const ModelConfig& config) {
  ModelConfig listed = config;
  listed.layers = config.LayerList();
  listed.final_norm = config.FinalNorm();
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(listed), "listed");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->layers.empty());
  return *parsed;
}

struct Outputs {
  std::vector<float> prefill_logits;
  std::vector<float> decode_logits;
  StateBlob state;
};

Outputs RunModel(const Model& model) {
  BackendOptions options;
  options.prefill_chunk_size = 8;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  absl::StatusOr<SlotId> slot = (*b)->AllocateSlot();
  EXPECT_TRUE(slot.ok());
  const int64_t vocab = model.config.vocab_size;
  std::vector<TokenId> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back((i * 37 + 11) % 256);
  Outputs run;
  run.prefill_logits.resize(prompt.size() * vocab);
  EXPECT_TRUE((*b)->Prefill(*slot, prompt, absl::MakeSpan(run.prefill_logits)).ok());
  run.decode_logits.resize(vocab);
  const DecodeItem item{*slot, 42};
  EXPECT_TRUE((*b)->Decode({&item, 1}, absl::MakeSpan(run.decode_logits)).ok());
  EXPECT_TRUE((*b)->ReadSlot(*slot, run.state).ok());
  return run;
}

TEST(LayerListTest, ListedLayersGiveBitwiseTheSingleBlockModel) {
  ModelConfig post = TinyConfig();
  post.norm = NormPlacement::kPost;
  post.feature_map = FeatureMap::kFavorPlus;
  post.feature_dim = 12;
  post.activation = Activation::kRelu;
  post.bias = false;
  for (const ModelConfig& config : {TinyConfig(), post}) {
    const Model single = MakeRandomModel(config, 5);
    Model listed;
    listed.config = Listed(config);
    listed.weights = single.weights;
    ASSERT_TRUE(ValidateWeights(listed.config, listed.weights).ok());
    const Outputs a = RunModel(single);
    const Outputs b = RunModel(listed);
    EXPECT_EQ(a.prefill_logits, b.prefill_logits);
    EXPECT_EQ(a.decode_logits, b.decode_logits);
    EXPECT_EQ(a.state.position, b.state.position);
    EXPECT_EQ(a.state.state, b.state.state);
  }
}

}  // namespace
}  // namespace linserve
