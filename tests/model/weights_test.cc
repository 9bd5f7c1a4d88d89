#include "model/format/weights.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/format/safetensors.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSource[] = "m/model.safetensors";

std::vector<std::string> Names(const ModelConfig& config) {
  std::vector<std::string> names;
  ModelWeights w;
  ForEachTensorToFill(config, w,
                      [&](const TensorSpec& spec, Tensor&) { names.push_back(spec.name); });
  return names;
}

// The tensors of `weights` as named safetensors entries (all F32), for editing in tests.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> data;

  void Add(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
    names.push_back(std::move(name));
    shapes.push_back(std::move(shape));
    data.push_back(std::move(values));
  }
  size_t Find(std::string_view name) const {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return i;
    }
    ADD_FAILURE() << "no tensor " << name;
    return 0;
  }
  void Remove(std::string_view name) {
    const size_t i = Find(name);
    names.erase(names.begin() + static_cast<ptrdiff_t>(i));
    shapes.erase(shapes.begin() + static_cast<ptrdiff_t>(i));
    data.erase(data.begin() + static_cast<ptrdiff_t>(i));
  }
  std::unique_ptr<SafetensorsFile> File(Dtype dtype = Dtype::kF32) const {
    std::vector<SafetensorsWriteTensor> tensors;
    for (size_t i = 0; i < names.size(); ++i) {
      tensors.push_back({names[i], dtype, shapes[i], data[i], {}});
    }
    absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto file = SafetensorsFile::Parse(*std::move(bytes), kSource);
    EXPECT_TRUE(file.ok()) << file.status();
    return *std::move(file);
  }
};

NamedTensors FromWeights(const ModelConfig& config, const ModelWeights& weights) {
  NamedTensors out;
  ForEachTensor(config, weights, [&](const TensorSpec& spec, const Tensor& t) {
    out.Add(spec.name, spec.shape, t.data);
  });
  return out;
}

std::string ReadError(const ModelConfig& config, const SafetensorsFile& file) {
  absl::StatusOr<ModelWeights> w = ReadModelWeights(config, file);
  EXPECT_FALSE(w.ok());
  if (w.ok()) return "";
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(), HasSubstr(kSource));
  return std::string(w.status().message());
}

TEST(WeightsTest, TensorNamesFollowTheConfig) {
  ModelConfig c = TinyConfig();
  c.n_layers = 1;
  EXPECT_THAT(Names(c),
              ElementsAre("embed.weight", "layers.0.ln1.weight", "layers.0.ln1.bias",
                          "layers.0.attn.q_proj.weight", "layers.0.attn.q_proj.bias",
                          "layers.0.attn.k_proj.weight", "layers.0.attn.k_proj.bias",
                          "layers.0.attn.v_proj.weight", "layers.0.attn.v_proj.bias",
                          "layers.0.attn.o_proj.weight", "layers.0.attn.o_proj.bias",
                          "layers.0.ln2.weight", "layers.0.ln2.bias", "layers.0.ffn.fc1.weight",
                          "layers.0.ffn.fc1.bias", "layers.0.ffn.fc2.weight",
                          "layers.0.ffn.fc2.bias", "final_norm.weight", "final_norm.bias"));
  c.bias = false;
  c.norm = NormPlacement::kPost;
  c.tie_embeddings = false;
  c.position = PositionEmbedding::kLearned;
  c.max_position = 16;
  c.feature_map = FeatureMap::kFavorPlus;
  c.feature_dim = 12;
  EXPECT_THAT(
      Names(c),
      ElementsAre("embed.weight", "pos_embed.weight", "layers.0.ln1.weight", "layers.0.ln1.bias",
                  "layers.0.attn.q_proj.weight", "layers.0.attn.k_proj.weight",
                  "layers.0.attn.v_proj.weight", "layers.0.attn.o_proj.weight",
                  "layers.0.attn.favor_projection", "layers.0.ln2.weight", "layers.0.ln2.bias",
                  "layers.0.ffn.fc1.weight", "layers.0.ffn.fc2.weight", "lm_head.weight"));
}

TEST(WeightsTest, ShapesFollowTheConfig) {
  ModelConfig c = TinyConfig();
  c.tie_embeddings = false;
  c.feature_map = FeatureMap::kFavorPlus;
  c.feature_dim = 12;
  std::map<std::string, std::vector<int64_t>> shapes;
  ModelWeights w;
  ForEachTensorToFill(c, w,
                      [&](const TensorSpec& spec, Tensor&) { shapes[spec.name] = spec.shape; });
  EXPECT_EQ(w.layers.size(), 2u);
  EXPECT_THAT(shapes["embed.weight"], ElementsAre(260, 32));
  EXPECT_THAT(shapes["layers.1.attn.q_proj.weight"], ElementsAre(32, 32));
  EXPECT_THAT(shapes["layers.1.attn.o_proj.bias"], ElementsAre(32));
  EXPECT_THAT(shapes["layers.1.attn.favor_projection"], ElementsAre(12, 8));
  EXPECT_THAT(shapes["layers.1.ffn.fc1.weight"], ElementsAre(64, 32));
  EXPECT_THAT(shapes["layers.1.ffn.fc1.bias"], ElementsAre(64));
  EXPECT_THAT(shapes["layers.1.ffn.fc2.weight"], ElementsAre(32, 64));
  EXPECT_THAT(shapes["lm_head.weight"], ElementsAre(260, 32));
}

TEST(WeightsTest, ParameterCountSumsEveryTensor) {
  const ModelConfig c = TinyConfig();
  const ModelWeights w = MakeRandomWeights(c, 1);
  const int64_t d = 32, ff = 64, vocab = 260;
  const int64_t per_layer = 4 * d + 4 * (d * d + d) + (ff * d + ff) + (d * ff + d);
  EXPECT_EQ(w.ParameterCount(), vocab * d + 2 * per_layer + 2 * d);
}

TEST(WeightsTest, RandomWeightsPassValidation) {
  const ModelConfig c = TinyConfig();
  EXPECT_TRUE(ValidateWeights(c, MakeRandomWeights(c, 3)).ok());
}

TEST(WeightsTest, ValidateRejectsWrongShapesExtraTensorsAndNonFiniteValues) {
  const ModelConfig c = TinyConfig();
  ModelWeights w = MakeRandomWeights(c, 3);
  w.layers[1].tensors.at("attn.q_proj.weight").shape = {16, 64};
  EXPECT_THAT(ValidateWeights(c, w).message(),
              AllOf(HasSubstr("\"layers.1.attn.q_proj.weight\""), HasSubstr("[16, 64]"),
                    HasSubstr("expected [32, 32]")));

  w = MakeRandomWeights(c, 3);
  w.layers[0].tensors.at("ffn.fc1.bias").data.pop_back();
  EXPECT_THAT(ValidateWeights(c, w).message(),
              AllOf(HasSubstr("\"layers.0.ffn.fc1.bias\""), HasSubstr("63 values")));

  w = MakeRandomWeights(c, 3);
  w.lm_head = w.token_embedding;  // tied config: no lm_head
  EXPECT_THAT(ValidateWeights(c, w).message(),
              AllOf(HasSubstr("\"lm_head.weight\""), HasSubstr("no such tensor")));

  // A layer holds exactly the tensors its kinds declare: linear attention has no conv.weight.
  w = MakeRandomWeights(c, 3);
  w.layers[1].tensors["conv.weight"] = w.layers[1].tensors.at("ffn.fc1.bias");
  EXPECT_THAT(ValidateWeights(c, w).message(),
              AllOf(HasSubstr("\"layers.1.conv.weight\""), HasSubstr("no such tensor")));

  w = MakeRandomWeights(c, 3);
  w.final_norm_bias.data[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(ValidateWeights(c, w).message(),
              AllOf(HasSubstr("\"final_norm.bias\""), HasSubstr("element 5"), HasSubstr("finite")));

  w = MakeRandomWeights(c, 3);
  w.layers.pop_back();
  EXPECT_THAT(ValidateWeights(c, w).message(), HasSubstr("1 layers; config n_layers is 2"));
}

TEST(WeightsTest, ReadsEveryTensorExactly) {
  const ModelConfig c = TinyConfig();
  const ModelWeights w = MakeRandomWeights(c, 11);
  absl::StatusOr<ModelWeights> back = ReadModelWeights(c, *FromWeights(c, w).File());
  ASSERT_TRUE(back.ok()) << back.status();
  ForEachTensor(c, w, [&](const TensorSpec& spec, const Tensor& t) {
    // The visit of `back` gives the same names.
    ForEachTensor(c, *back, [&](const TensorSpec& other, const Tensor& u) {
      if (other.name != spec.name) return;
      EXPECT_EQ(u.shape, t.shape) << spec.name;
      EXPECT_EQ(u.data, t.data) << spec.name;
    });
  });
}

TEST(WeightsTest, HalfPrecisionFilesAreWidened) {
  const ModelConfig c = TinyConfig();
  const ModelWeights w = MakeRandomWeights(c, 12);
  for (Dtype dtype : {Dtype::kF16, Dtype::kBF16}) {
    absl::StatusOr<ModelWeights> back = ReadModelWeights(c, *FromWeights(c, w).File(dtype));
    ASSERT_TRUE(back.ok()) << back.status();
    const std::vector<float>& in = w.layers[1].tensors.at("ffn.fc2.weight").data;
    const std::vector<float>& out = back->layers[1].tensors.at("ffn.fc2.weight").data;
    ASSERT_EQ(in.size(), out.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const float expected = dtype == Dtype::kF16 ? HalfToFloat(FloatToHalf(in[i]))
                                                  : BFloat16ToFloat(FloatToBFloat16(in[i]));
      ASSERT_EQ(out[i], expected) << i;
    }
  }
}

TEST(WeightsTest, MissingTensorsAreNamed) {
  const ModelConfig c = TinyConfig();
  NamedTensors t = FromWeights(c, MakeRandomWeights(c, 1));
  t.Remove("layers.1.attn.k_proj.bias");
  t.Remove("final_norm.weight");
  EXPECT_THAT(ReadError(c, *t.File()),
              AllOf(HasSubstr("missing 2 tensors"), HasSubstr("\"layers.1.attn.k_proj.bias\""),
                    HasSubstr("\"final_norm.weight\"")));
}

TEST(WeightsTest, ManyMissingTensorsAreSummarised) {
  ModelConfig c = TinyConfig();
  c.n_layers = 4;
  NamedTensors t;
  t.Add("embed.weight", {260, 32}, std::vector<float>(260 * 32));
  const std::string message = ReadError(c, *t.File());
  EXPECT_THAT(message, AllOf(HasSubstr("missing 66 tensors"), HasSubstr("(and 58 more)")));
}

TEST(WeightsTest, UnexpectedTensorsAreNamed) {
  const ModelConfig c = TinyConfig();
  NamedTensors t = FromWeights(c, MakeRandomWeights(c, 1));
  t.Add("lm_head.weight", {260, 32}, std::vector<float>(260 * 32));
  t.Add("layers.2.ln1.weight", {32}, std::vector<float>(32));
  EXPECT_THAT(ReadError(c, *t.File()),
              AllOf(HasSubstr("2 unexpected tensors"), HasSubstr("\"lm_head.weight\""),
                    HasSubstr("\"layers.2.ln1.weight\""), Not(HasSubstr("missing"))));
}

TEST(WeightsTest, WronglyShapedTensorsNameExpectedAndActual) {
  const ModelConfig c = TinyConfig();
  NamedTensors t = FromWeights(c, MakeRandomWeights(c, 1));
  const size_t i = t.Find("layers.0.ffn.fc1.weight");
  t.shapes[i] = {32, 64};  // transposed
  EXPECT_THAT(
      ReadError(c, *t.File()),
      AllOf(HasSubstr("\"layers.0.ffn.fc1.weight\" has shape [32, 64], expected [64, 32]")));
}

TEST(WeightsTest, NonFloatDtypeIsRejected) {
  const ModelConfig c = TinyConfig();
  NamedTensors t = FromWeights(c, MakeRandomWeights(c, 1));
  t.Remove("layers.0.ln1.bias");
  std::vector<SafetensorsWriteTensor> tensors;
  for (size_t k = 0; k < t.names.size(); ++k) {
    tensors.push_back({t.names[k], Dtype::kF32, t.shapes[k], t.data[k], {}});
  }
  const std::vector<int64_t> ints(32, 0);
  tensors.push_back({"layers.0.ln1.bias", Dtype::kI32, {32}, {}, ints});
  auto file = SafetensorsFile::Parse(SerializeSafetensors(tensors).value(), kSource);
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(ReadError(c, **file), AllOf(HasSubstr("\"layers.0.ln1.bias\" has dtype I32"),
                                          HasSubstr("F32, F16 or BF16")));
}

TEST(WeightsTest, NonFiniteWeightsAreRejected) {
  const ModelConfig c = TinyConfig();
  NamedTensors t = FromWeights(c, MakeRandomWeights(c, 1));
  t.data[t.Find("layers.1.attn.v_proj.weight")][7] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(ReadError(c, *t.File()),
              AllOf(HasSubstr("\"layers.1.attn.v_proj.weight\" element 7 is inf")));
}

TEST(WeightsTest, SerializeRejectsNonFloatDtypesAndInvalidWeights) {
  const ModelConfig c = TinyConfig();
  ModelWeights w = MakeRandomWeights(c, 1);
  EXPECT_THAT(SerializeModelWeights(c, w, Dtype::kI32).status().message(),
              HasSubstr("I32 is not one of F32, F16, BF16"));
  w.token_embedding.shape = {32, 260};
  EXPECT_THAT(SerializeModelWeights(c, w, Dtype::kF32).status().message(),
              HasSubstr("\"embed.weight\""));
}

}  // namespace
}  // namespace linserve
