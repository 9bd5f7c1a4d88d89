#include "tests/testing/random_model.h"

#include <cmath>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

double StdDev(const std::vector<float>& v) {
  double sum = 0, sum2 = 0;
  for (float x : v) {
    sum += x;
    sum2 += double{x} * x;
  }
  const double mean = sum / static_cast<double>(v.size());
  return std::sqrt(sum2 / static_cast<double>(v.size()) - mean * mean);
}

TEST(RandomModelTest, TinyConfigIsValid) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ModelConfigToJson(TinyConfig()), "tiny");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tokenizer, TokenizerKind::kByte);
}

TEST(RandomModelTest, SameSeedSameModelOtherSeedOtherModel) {
  const ModelConfig c = TinyConfig();
  const Model a = MakeRandomModel(c, 7);
  const Model b = MakeRandomModel(c, 7);
  const Model other = MakeRandomModel(c, 8);
  EXPECT_EQ(a.weights.layers[1].tensors.at("ffn.fc2.weight").data,
            b.weights.layers[1].tensors.at("ffn.fc2.weight").data);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_NE(a.weights.layers[1].tensors.at("ffn.fc2.weight").data,
            other.weights.layers[1].tensors.at("ffn.fc2.weight").data);
  EXPECT_NE(a.fingerprint, other.fingerprint);
  EXPECT_TRUE(ValidateWeights(c, a.weights).ok());
  ASSERT_NE(a.tokenizer, nullptr);
  EXPECT_EQ(a.tokenizer->vocab_size(), 260);
  EXPECT_EQ(a.directory, "");
}

TEST(RandomModelTest, WeightScalesFollowTheDocumentedScheme) {
  ModelConfig c = TinyConfig();
  c.d_model = 256;
  c.n_heads = 4;
  c.head_dim = 64;
  c.feature_dim = 64;
  c.d_ff = 512;
  c.tie_embeddings = false;
  const ModelWeights w = MakeRandomWeights(c, 3);
  EXPECT_NEAR(StdDev(w.layers[0].tensors.at("attn.q_proj.weight").data), 1.0 / 16,
              0.003);  // 1/sqrt(256)
  EXPECT_NEAR(StdDev(w.layers[0].tensors.at("ffn.fc2.weight").data), 1.0 / std::sqrt(512.0), 0.003);
  EXPECT_NEAR(StdDev(w.lm_head.data), 1.0 / 16, 0.003);
  EXPECT_NEAR(StdDev(w.token_embedding.data), 1.0, 0.02);
  EXPECT_NEAR(StdDev(w.layers[1].tensors.at("ln1.weight").data), 0.1, 0.02);
  double mean = 0;
  for (float g : w.layers[1].tensors.at("ln1.weight").data) mean += g;
  EXPECT_NEAR(mean / 256, 1.0, 0.03);
}

TEST(RandomModelTest, WriteModelDirectoryCreatesNestedDirectories) {
  ScopedTempDir dir;
  const ModelConfig c = TinyConfig();
  const std::string nested = dir.Join("a/b/model");
  ASSERT_TRUE(WriteModelDirectory(nested, c, MakeRandomWeights(c, 1)).ok());
  EXPECT_TRUE(std::filesystem::is_regular_file(nested + "/config.json"));
  EXPECT_TRUE(std::filesystem::is_regular_file(nested + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(nested + "/tokenizer.model"));
}

TEST(RandomModelTest, WriteModelDirectoryFailsWhereNothingCanBeCreated) {
  ScopedTempDir dir;
  const ModelConfig c = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.Join("file"), c, MakeRandomWeights(c, 1)).ok());
  // A path below a regular file cannot become a directory.
  const std::string below_file = dir.Join("file/config.json/x");
  absl::Status status = WriteModelDirectory(below_file, c, MakeRandomWeights(c, 1));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(below_file));
}

TEST(RandomModelDeathTest, SentencePieceConfigsCannotBeBuiltInMemory) {
  ModelConfig c = TinyConfig();
  c.tokenizer = TokenizerKind::kSentencePiece;
  EXPECT_DEATH(MakeRandomModel(c, 1), "only byte-tokenizer and tokenizer-less configs");
}

TEST(RandomModelDeathTest, InvalidConfigsAbortWithTheReason) {
  ModelConfig c = TinyConfig();
  c.d_model = 30;
  EXPECT_DEATH(MakeRandomModel(c, 1), "n_heads \\* head_dim");
}

TEST(ScopedTempDirTest, RemovesEverythingOnDestruction) {
  std::string path;
  {
    ScopedTempDir dir;
    path = dir.path();
    std::filesystem::create_directories(dir.Join("x/y"));
    EXPECT_TRUE(std::filesystem::is_directory(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace linserve
