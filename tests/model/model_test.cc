#include "model/model.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/format/file_io.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/sentencepiece_training.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

void ExpectSameWeights(const ModelConfig& config, const ModelWeights& a, const ModelWeights& b) {
  std::vector<const Tensor*> tb;
  ForEachTensor(config, b, [&](const TensorSpec&, const Tensor& t) { tb.push_back(&t); });
  size_t i = 0;
  ForEachTensor(config, a, [&](const TensorSpec& spec, const Tensor& t) {
    ASSERT_LT(i, tb.size());
    EXPECT_EQ(t.shape, tb[i]->shape) << spec.name;
    EXPECT_EQ(t.data, tb[i]->data) << spec.name;  // bit-exact
    ++i;
  });
  EXPECT_EQ(i, tb.size());
}

void WriteText(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok());
}

TEST(LoadModelTest, RoundTripsEveryVariantExactly) {
  ModelConfig post = TinyConfig();
  post.norm = NormPlacement::kPost;
  post.bias = false;
  post.tie_embeddings = false;
  post.activation = Activation::kRelu;
  ModelConfig favor = TinyConfig();
  favor.feature_map = FeatureMap::kFavorPlus;
  favor.feature_dim = 16;
  favor.position = PositionEmbedding::kLearned;
  favor.max_position = 64;
  favor.attention_eps = 1e-4;
  for (const ModelConfig& config : {TinyConfig(), post, favor}) {
    ScopedTempDir dir;
    const Model expected = MakeRandomModel(config, 5);
    ASSERT_TRUE(WriteModelDirectory(dir.path(), config, expected.weights).ok());
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->directory, dir.path());
    EXPECT_EQ(ModelConfigToJson((*model)->config), ModelConfigToJson(config));
    ExpectSameWeights(config, (*model)->weights, expected.weights);
    EXPECT_EQ((*model)->weights.ParameterCount(), expected.weights.ParameterCount());
    ASSERT_NE((*model)->tokenizer, nullptr);
    EXPECT_EQ((*model)->tokenizer->vocab_size(), config.vocab_size);
    // The in-memory model carries the fingerprint of its on-disk F32 copy.
    EXPECT_EQ((*model)->fingerprint, expected.fingerprint);
  }
}

TEST(LoadModelTest, HalfPrecisionDirectoriesLoadAsRoundedFp32) {
  const ModelConfig config = TinyConfig();
  const ModelWeights weights = MakeRandomWeights(config, 8);
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    ScopedTempDir dir;
    ASSERT_TRUE(WriteModelDirectory(dir.path(), config, weights, dtype).ok());
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
    ASSERT_TRUE(model.ok()) << model.status();
    const float in = weights.layers[0].tensors.at("attn.q_proj.weight").data[3];
    const float out = (*model)->weights.layers[0].tensors.at("attn.q_proj.weight").data[3];
    EXPECT_EQ(out, dtype == Dtype::kF16 ? HalfToFloat(FloatToHalf(in))
                                        : BFloat16ToFloat(FloatToBFloat16(in)));
  }
}

TEST(LoadModelTest, FingerprintIsTheSha256OfBothFiles) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string fingerprint = (*model)->fingerprint;
  EXPECT_THAT(fingerprint, MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(fingerprint, ModelFingerprint(ReadFileToString(dir.Join("config.json")).value(),
                                          ReadFileToString(dir.Join("model.safetensors")).value()));
  // Known answer: SHA-256("abc").
  EXPECT_EQ(ModelFingerprint("a", "bc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  // Different weights, or the same config text formatted differently, change it.
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 2)).ok());
  absl::StatusOr<std::unique_ptr<Model>> other = LoadModel(dir.path());
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->fingerprint, fingerprint);
  const std::string text = ReadFileToString(dir.Join("config.json")).value();
  WriteText(dir.Join("config.json"), text + "\n");
  absl::StatusOr<std::unique_ptr<Model>> reformatted = LoadModel(dir.path());
  ASSERT_TRUE(reformatted.ok());
  EXPECT_NE((*reformatted)->fingerprint, (*other)->fingerprint);
}

TEST(LoadModelTest, MissingDirectory) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel("/no/such/model/dir");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("/no/such/model/dir"));
}

TEST(LoadModelTest, MissingConfigJson) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  std::filesystem::remove(dir.Join("config.json"));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr(dir.Join("config.json")));
}

TEST(LoadModelTest, BadConfigNamesTheFileAndField) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  std::string text = ReadFileToString(dir.Join("config.json")).value();
  text.replace(text.find("\"n_layers\": 2"), 13, "\"n_layers\": 0");
  WriteText(dir.Join("config.json"), text);
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr(dir.Join("config.json")),
                                              HasSubstr("\"n_layers\""), HasSubstr("[1, 1024]")));
}

TEST(LoadModelTest, MissingWeightsFile) {
  ScopedTempDir dir;
  WriteText(dir.Join("config.json"), ModelConfigToJson(TinyConfig()));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr(dir.Join("model.safetensors")));
}

TEST(LoadModelTest, WeightsThatDoNotMatchTheConfigNameTheFile) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  ModelConfig wider = config;
  wider.d_ff = 128;
  WriteText(dir.Join("config.json"), ModelConfigToJson(wider));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(
      model.status().message(),
      AllOf(HasSubstr(dir.Join("model.safetensors")),
            HasSubstr("\"layers.0.ffn.fc1.weight\" has shape [64, 32], expected [128, 32]")));
}

TEST(LoadModelTest, TruncatedWeightsFile) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  std::filesystem::resize_file(dir.Join("model.safetensors"),
                               std::filesystem::file_size(dir.Join("model.safetensors")) - 100);
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr(dir.Join("model.safetensors")), HasSubstr("past the end")));
}

class SentencePieceModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScopedTempDir();
    const std::string error =
        TrainSentencePiece(SentencePieceTestCorpus(), 400, dir_->Join("tokenizer.model"));
    ASSERT_EQ(error, "");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static ModelConfig SentencePieceConfig(int32_t vocab_size) {
    ModelConfig c = TinyConfig();
    c.tokenizer = TokenizerKind::kSentencePiece;
    c.vocab_size = vocab_size;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
  }
  static ScopedTempDir* dir_;
};

ScopedTempDir* SentencePieceModelTest::dir_ = nullptr;

TEST_F(SentencePieceModelTest, LoadsTheTokenizerModel) {
  const ModelConfig config = SentencePieceConfig(400);
  ASSERT_TRUE(WriteModelDirectory(dir_->path(), config, MakeRandomWeights(config, 1)).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir_->path());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->tokenizer->vocab_size(), 400);
  absl::StatusOr<std::vector<TokenId>> ids = (*model)->tokenizer->Encode("hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*model)->tokenizer->Decode(*ids).value(), " hello world");
}

TEST_F(SentencePieceModelTest, VocabSizeMustMatchTheConfig) {
  const ModelConfig config = SentencePieceConfig(512);
  ASSERT_TRUE(WriteModelDirectory(dir_->path(), config, MakeRandomWeights(config, 1)).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir_->path());
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              AllOf(HasSubstr(dir_->Join("tokenizer.model")), HasSubstr("has 400 pieces"),
                    HasSubstr("vocab_size is 512")));
}

TEST(LoadModelTest, SentencePieceConfigWithoutTokenizerModel) {
  ScopedTempDir dir;
  ModelConfig config = TinyConfig();
  config.tokenizer = TokenizerKind::kSentencePiece;
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr(dir.Join("tokenizer.model")));
}

TEST(LoadModelTest, CorruptTokenizerModel) {
  ScopedTempDir dir;
  ModelConfig config = TinyConfig();
  config.tokenizer = TokenizerKind::kSentencePiece;
  ASSERT_TRUE(WriteModelDirectory(dir.path(), config, MakeRandomWeights(config, 1)).ok());
  WriteText(dir.Join("tokenizer.model"), "this is not a protobuf");
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), AllOf(HasSubstr(dir.Join("tokenizer.model")),
                                              HasSubstr("not a SentencePiece model")));
}

}  // namespace
}  // namespace linserve
