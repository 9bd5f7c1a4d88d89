// Issue 28: weights stored int8 in the model file (config.json weight_format int8, I8 projections
// with "<name>.scales", reference/quantize_weights.py). PackedMatrix's factory from stored q and
// scales; the config field; the loader's refusals, each naming the tensor and the limit; the CPU
// backend on reference/quantize_weights.py's output giving bitwise the logits of the float model
// loaded with --weight_precision int8; what each backend makes of --weight_precision on an int8
// file (the CUDA backend refuses the format).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/packed_matrix.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/backend/weight_precision.h"
#include "model/format/config.h"
#include "model/format/safetensors.h"
#include "model/format/weights.h"
#include "model/model.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using cpu::PackedMatrix;
using cpu::WeightFormat;

// ---- PackedMatrix::FromInt8 ----------------------------------------------------------------

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool SameBytes(const PackedMatrix& a, const PackedMatrix& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.panel(0), b.panel(0), a.bytes()) == 0;
}

TEST(PackedMatrixFromInt8Test, OfQuantizeInt8IsBytewisePacksInt8) {
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{21, 75}, {16, 32}, {3, 1}, {40, 130}}) {
    std::vector<float> w = RandomFloats(static_cast<size_t>(out * in), out * 1000 + in);
    if (in > 32) std::fill_n(w.begin() + 32, 32, 0.0f);  // an all-zero block
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(out * PackedMatrix::Int8Blocks(in)));
    PackedMatrix::QuantizeInt8(w.data(), out, in, q.data(), scales.data());
    const PackedMatrix stored = PackedMatrix::FromInt8(q.data(), scales.data(), out, in);
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), out, in, WeightFormat::kInt8);
    EXPECT_EQ(stored.format(), WeightFormat::kInt8);
    EXPECT_TRUE(SameBytes(stored, packed)) << out << " x " << in;
  }
}

// Stored q need not reach ±127 in a block, nor scales be max|w| / 127: they are packed as given.
TEST(PackedMatrixFromInt8Test, PacksAnyQAndScalesAsGiven) {
  const int64_t out = 18, in = 70;
  const int64_t blocks = PackedMatrix::Int8Blocks(in);
  std::mt19937_64 rng(5);
  std::vector<int8_t> q(static_cast<size_t>(out * in));
  for (int8_t& x : q) x = static_cast<int8_t>(static_cast<int>(rng() % 61) - 30);
  std::vector<float> scales = RandomFloats(static_cast<size_t>(out * blocks), 6);
  for (float& s : scales) s = std::abs(s);
  const PackedMatrix m = PackedMatrix::FromInt8(q.data(), scales.data(), out, in);
  std::vector<float> w(q.size());
  m.Dequantize(w.data());
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      const float expected = static_cast<float>(q[r * in + k]) * scales[r * blocks + k / 32];
      ASSERT_EQ(w[r * in + k], expected) << r << ", " << k;
    }
  }
}

// ---- config.json weight_format -------------------------------------------------------------

std::string TinyConfigJson(const std::string& weight_format) {
  std::string json = ModelConfigToJson(TinyConfig());
  json.insert(json.find('{') + 1, "\"weight_format\": " + weight_format + ",");
  return json;
}

TEST(WeightFormatConfigTest, Int8Block32ParsesAndRoundTrips) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig(TinyConfigJson(R"({"kind": "int8", "block": 32})"), "c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->weight_format, WeightFileFormat::kInt8);
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), "back.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->weight_format, WeightFileFormat::kInt8);
  absl::StatusOr<ModelConfig> plain = ParseModelConfig(ModelConfigToJson(TinyConfig()), "p");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->weight_format, WeightFileFormat::kFloat);
  EXPECT_TRUE(ParseModelConfig(TinyConfigJson(R"({"kind": "float"})"), "f").ok());
}

TEST(WeightFormatConfigTest, RefusalsNameTheFieldAndTheLimit) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"kind": "int8", "block": 64})",
       {"field \"weight_format.block\"", "must be 32", "got 64"}},
      {R"({"kind": "int8"})", {"field \"weight_format.block\"", "is required"}},
      {R"({"kind": "int4"})", {"field \"weight_format.kind\"", "\"float\", \"int8\"", "int4"}},
      {R"({"block": 32})", {"field \"weight_format.kind\"", "is required"}},
      {R"({"kind": "float", "block": 32})", {"unknown field", "\"weight_format.block\""}},
      {R"("int8")", {"field \"weight_format\"", "must be an object"}},
  };
  for (const auto& [field, needles] : cases) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(TinyConfigJson(field), "c.json");
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& needle : needles) {
      EXPECT_THAT(std::string(c.status().message()), HasSubstr(needle)) << field;
    }
  }
}

// ---- The loader's refusals -----------------------------------------------------------------

// A stored-int8 model.safetensors for `config` (weight_format set by the caller), built tensor
// by tensor so that each test can break one thing: `edit` sees every tensor before it is written.
struct StoredTensor {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

std::vector<StoredTensor> Int8Tensors(const ModelConfig& config, const ModelWeights& weights) {
  std::vector<StoredTensor> out;
  ForEachTensor(config, weights, [&](const TensorSpec& spec, const Tensor& t) {
    if (!spec.projection) {
      out.push_back({spec.name, Dtype::kF32, spec.shape, t.data, {}});
      return;
    }
    const int64_t rows = spec.shape[0], in = spec.shape[1];
    std::vector<int8_t> q(t.data.size());
    std::vector<float> scales(static_cast<size_t>(rows * PackedMatrix::Int8Blocks(in)));
    PackedMatrix::QuantizeInt8(t.data.data(), rows, in, q.data(), scales.data());
    out.push_back(
        {spec.name, Dtype::kI8, spec.shape, {}, std::vector<int64_t>(q.begin(), q.end())});
    out.push_back({Int8ScalesName(spec.name), Dtype::kF32, {rows, PackedMatrix::Int8Blocks(in)},
                   scales, {}});
  });
  return out;
}

std::string Serialize(const std::vector<StoredTensor>& tensors) {
  std::vector<SafetensorsWriteTensor> write;
  for (const StoredTensor& t : tensors) {
    write.push_back({t.name, t.dtype, t.shape, t.floats, t.ints});
  }
  absl::StatusOr<std::string> bytes = SerializeSafetensors(write);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

absl::StatusOr<ModelWeights> Read(const ModelConfig& config,
                                  const std::vector<StoredTensor>& tensors) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Parse(Serialize(tensors), "m.safetensors");
  if (!file.ok()) return file.status();
  return ReadModelWeights(config, **file);
}

StoredTensor& Named(std::vector<StoredTensor>& tensors, const std::string& name) {
  for (StoredTensor& t : tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return tensors.front();
}

ModelConfig Int8Config() {
  ModelConfig c = TinyConfig();
  c.tie_embeddings = false;  // lm_head is a projection too
  c.weight_format = WeightFileFormat::kInt8;
  return c;
}

TEST(StoredInt8LoaderTest, ReadsQScalesAndTheirProduct) {
  const ModelConfig config = Int8Config();
  const ModelWeights w = MakeRandomWeights(config, 11);
  std::vector<StoredTensor> tensors = Int8Tensors(config, w);
  absl::StatusOr<ModelWeights> read = Read(config, tensors);
  ASSERT_TRUE(read.ok()) << read.status();
  const Tensor& q =
      read->layers[1].tensors.at("ffn.fc2.weight");  // [d_model 32, d_ff 64]: 2 blocks per row
  const StoredTensor& stored_q = Named(tensors, "layers.1.ffn.fc2.weight");
  const StoredTensor& stored_s = Named(tensors, "layers.1.ffn.fc2.weight.scales");
  ASSERT_EQ(q.int8_q.size(), stored_q.ints.size());
  EXPECT_EQ(q.int8_scales, stored_s.floats);
  for (size_t i = 0; i < q.int8_q.size(); ++i) {
    ASSERT_EQ(q.int8_q[i], stored_q.ints[i]);
    const float scale = stored_s.floats[i / 64 * 2 + i % 64 / 32];
    ASSERT_EQ(q.data[i], static_cast<float>(q.int8_q[i]) * scale);
  }
  EXPECT_FALSE(read->lm_head.int8_q.empty());
  EXPECT_TRUE(read->token_embedding.int8_q.empty());  // embeddings stay float
  EXPECT_TRUE(read->layers[0].tensors.at("ln1.weight").int8_q.empty());
  EXPECT_TRUE(ValidateWeights(config, *read).ok());
}

struct Refusal {
  std::string what;
  std::function<void(std::vector<StoredTensor>&)> edit;
  std::vector<std::string> needles;
};

TEST(StoredInt8LoaderTest, EachRefusalNamesTheTensorAndTheLimit) {
  const ModelConfig config = Int8Config();
  const ModelWeights w = MakeRandomWeights(config, 12);
  const std::string q = "layers.0.attn.k_proj.weight";
  const std::string s = q + ".scales";
  const std::vector<Refusal> refusals = {
      {"scales missing",
       [&](auto& t) { std::erase_if(t, [&](const StoredTensor& x) { return x.name == s; }); },
       {"\"" + q + "\" is I8 but its scales tensor \"" + s + "\" is missing", "F32 [32, 1]",
        "block of 32"}},
      {"scales of a block of 16",
       [&](auto& t) {
         Named(t, s).shape = {32, 2};
         Named(t, s).floats.resize(64, 0.01f);
       },
       {"\"" + s + "\" has shape [32, 2], expected [32, 1]", "block of 32 of the 32 inputs"}},
      {"scales F16",
       [&](auto& t) { Named(t, s).dtype = Dtype::kF16; },
       {"\"" + s + "\" has dtype F16; int8 scales must be F32"}},
      {"a NaN scale",
       [&](auto& t) { Named(t, s).floats[3] = std::numeric_limits<float>::quiet_NaN(); },
       {"\"" + s + "\" element 3 is nan", "finite and non-negative"}},
      {"an infinite scale",
       [&](auto& t) { Named(t, s).floats[4] = std::numeric_limits<float>::infinity(); },
       {"\"" + s + "\" element 4 is inf", "finite and non-negative"}},
      {"a negative scale",
       [&](auto& t) { Named(t, s).floats[5] = -0.5f; },
       {"\"" + s + "\" element 5 is -0.5", "finite and non-negative"}},
      {"q of -128",
       [&](auto& t) { Named(t, q).ints[7] = -128; },
       {"\"" + q + "\" element 7 is -128", "[-127, 127]"}},
      {"a projection stored as float",
       [&](auto& t) {
         StoredTensor& x = Named(t, q);
         x.dtype = Dtype::kF32;
         x.floats.assign(x.ints.begin(), x.ints.end());
         x.ints.clear();
       },
       {"\"" + q + "\" has dtype F32; config.json's weight_format int8 stores every projection "
        "matrix as I8"}},
      {"q of the wrong shape",
       [&](auto& t) { Named(t, q).shape = {16, 64}; },
       {"\"" + q + "\" has shape [16, 64], expected [32, 32]"}},
      {"an embedding stored I8",
       [&](auto& t) {
         StoredTensor& x = Named(t, "embed.weight");
         x.dtype = Dtype::kI8;
         x.ints.assign(x.floats.size(), 1);
         x.floats.clear();
       },
       {"\"embed.weight\" has dtype I8 but config.json declares no weight_format int8",
        "only projection matrices may be I8"}},
  };
  for (const Refusal& r : refusals) {
    std::vector<StoredTensor> tensors = Int8Tensors(config, w);
    r.edit(tensors);
    absl::StatusOr<ModelWeights> read = Read(config, tensors);
    ASSERT_FALSE(read.ok()) << r.what;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << r.what;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr("m.safetensors: ")) << r.what;
    for (const std::string& needle : r.needles) {
      EXPECT_THAT(std::string(read.status().message()), HasSubstr(needle)) << r.what;
    }
  }
}

TEST(StoredInt8LoaderTest, AnInt8FileUnderAFloatConfigIsRefusedNamingTheConfigField) {
  ModelConfig config = Int8Config();
  const ModelWeights w = MakeRandomWeights(config, 13);
  const std::vector<StoredTensor> tensors = Int8Tensors(config, w);
  config.weight_format = WeightFileFormat::kFloat;
  absl::StatusOr<ModelWeights> read = Read(config, tensors);
  ASSERT_FALSE(read.ok());
  const std::string message(read.status().message());
  EXPECT_THAT(message, HasSubstr("tensor \"layers.0.attn.q_proj.weight\" has dtype I8 but "
                                 "config.json declares no weight_format int8"));
  EXPECT_THAT(message, HasSubstr("\"layers.0.attn.q_proj.weight.scales\""));
  EXPECT_THAT(message, HasSubstr("(not used by this config)"));
}

TEST(StoredInt8LoaderTest, TheFloatWriterRefusesAnInt8Config) {
  const ModelConfig config = Int8Config();
  absl::StatusOr<std::string> bytes =
      SerializeModelWeights(config, MakeRandomWeights(config, 14), Dtype::kF32);
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("config weight_format int8: this writer stores float weights only"));
}

// ---- --weight_precision against the stored format ------------------------------------------

TEST(StoredInt8PrecisionTest, CpuRunsInt8OrWidensToFp32AndRefusesHalves) {
  EXPECT_EQ(*CpuWeightPrecision(WeightPrecision::kAuto, WeightFileFormat::kInt8),
            WeightPrecision::kInt8);
  EXPECT_EQ(*CpuWeightPrecision(WeightPrecision::kInt8, WeightFileFormat::kInt8),
            WeightPrecision::kInt8);
  EXPECT_EQ(*CpuWeightPrecision(WeightPrecision::kFp32, WeightFileFormat::kInt8),
            WeightPrecision::kFp32);
  for (WeightPrecision p : {WeightPrecision::kBf16, WeightPrecision::kFp16}) {
    absl::StatusOr<WeightPrecision> r = CpuWeightPrecision(p, WeightFileFormat::kInt8);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(std::string("weight_precision ") +
                                std::string(WeightPrecisionName(p))),
                      HasSubstr("stores its weights int8"), HasSubstr("widens to fp32")));
  }
  for (WeightPrecision p : {WeightPrecision::kAuto, WeightPrecision::kFp32, WeightPrecision::kBf16,
                            WeightPrecision::kFp16, WeightPrecision::kInt8}) {
    EXPECT_EQ(*CpuWeightPrecision(p, WeightFileFormat::kFloat), CpuWeightPrecision(p));
  }
}

// The CUDA backend refuses the int8 file format whatever was requested (CreateCudaBackend asks
// this before it looks for a device, so the refusal needs no GPU).
TEST(StoredInt8PrecisionTest, CudaRefusesTheInt8FileFormat) {
  for (WeightPrecision p : {WeightPrecision::kAuto, WeightPrecision::kFp32, WeightPrecision::kBf16,
                            WeightPrecision::kFp16, WeightPrecision::kInt8}) {
    absl::StatusOr<WeightPrecision> r = CudaWeightPrecision(p, WeightFileFormat::kInt8);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr("model file format int8 (config.json weight_format)"),
                      HasSubstr("the CUDA backend does not read int8-stored weights")));
  }
  EXPECT_EQ(*CudaWeightPrecision(WeightPrecision::kAuto, WeightFileFormat::kFloat),
            WeightPrecision::kBf16);
}

// The CPU backend packs a stored-int8 tensor from its q and scales, never from q · scale
// quantized again: here q stays 1 where quantizing q · scale again would give 127.
TEST(StoredInt8PrecisionTest, CpuPacksTheStoredQAndScalesAsTheyAre) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  BackendOptions options;
  options.weight_precision = WeightPrecision::kInt8;
  CpuWorkspace workspace;
  const CpuLayerContext context{
      .model = model, .options = options, .threads = 1, .max_rows = 1, .workspace = workspace};
  const int64_t out = 20, in = 40;
  Tensor t;
  t.shape = {out, in};
  t.int8_q.assign(static_cast<size_t>(out * in), 1);
  t.int8_scales.assign(static_cast<size_t>(out * 2), 0.3f);
  t.data.assign(t.int8_q.size(), 0.3f);
  const PackedMatrix stored =
      PackedMatrix::FromInt8(t.int8_q.data(), t.int8_scales.data(), out, in);
  const PackedMatrix requantized = PackedMatrix::Pack(t.data.data(), out, in, WeightFormat::kInt8);
  ASSERT_FALSE(SameBytes(stored, requantized));
  EXPECT_TRUE(SameBytes(PackWeights(context, t), stored));
  options.weight_precision = WeightPrecision::kFp32;  // widened: q · scale, as fp32
  EXPECT_TRUE(SameBytes(PackWeights(context, t), PackedMatrix::Pack(t.data.data(), out, in)));
}

// ---- The converter's output on the CPU backend ---------------------------------------------

// Every position's logits of `tokens` from a fresh slot, then 4 decode steps' logits.
std::vector<float> Logits(const Model& model, WeightPrecision precision,
                          const std::vector<TokenId>& tokens) {
  BackendOptions options;
  options.weight_precision = precision;
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  const int64_t vocab = model.config.vocab_size;
  absl::StatusOr<SlotId> slot = (*b)->AllocateSlot();
  EXPECT_TRUE(slot.ok());
  std::vector<float> logits((tokens.size() + 4) * vocab);
  EXPECT_TRUE(
      (*b)->Prefill(*slot, tokens, absl::MakeSpan(logits).first(tokens.size() * vocab)).ok());
  for (int i = 0; i < 4; ++i) {
    const DecodeItem item{*slot, tokens[static_cast<size_t>(i)]};
    EXPECT_TRUE((*b)->Decode({&item, 1}, absl::MakeSpan(logits).subspan(
                                             (tokens.size() + i) * vocab, vocab)).ok());
  }
  return logits;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(StoredInt8ConverterTest, LoadsToBitwiseTheLogitsOfLoadTimeInt8) {
  ModelConfig untied = TinyConfig();
  untied.tie_embeddings = false;
  ModelConfig based = TinyBasedConfig();
  based.tie_embeddings = false;
  for (const ModelConfig& config : {TinyConfig(), untied, TinyBasedConfig(), based}) {
    ScopedTempDir dir;
    const std::string float_dir = dir.Join("float"), int8_dir = dir.Join("int8");
    ASSERT_TRUE(WriteModelDirectory(float_dir, config, MakeRandomWeights(config, 21)).ok());
    const std::string cmd = std::string(LINSERVE_PYTHON) + " " + LINSERVE_SOURCE_DIR +
                            "/reference/quantize_weights.py --format int8 --model " + float_dir +
                            " --out " + int8_dir;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    absl::StatusOr<std::unique_ptr<Model>> float_model = LoadModel(float_dir);
    ASSERT_TRUE(float_model.ok()) << float_model.status();
    absl::StatusOr<std::unique_ptr<Model>> int8_model = LoadModel(int8_dir);
    ASSERT_TRUE(int8_model.ok()) << int8_model.status();
    EXPECT_EQ((*int8_model)->config.weight_format, WeightFileFormat::kInt8);

    std::mt19937_64 rng(3);
    std::vector<TokenId> tokens(40);
    for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % 256);
    const std::vector<float> reference = Logits(**float_model, WeightPrecision::kInt8, tokens);
    const std::vector<float> fp32 = Logits(**float_model, WeightPrecision::kFp32, tokens);
    ASSERT_FALSE(reference.empty());
    ASSERT_FALSE(BitwiseEqual(reference, fp32));  // int8 is not fp32: the comparison can fail
    EXPECT_TRUE(BitwiseEqual(Logits(**int8_model, WeightPrecision::kAuto, tokens), reference));
    EXPECT_TRUE(BitwiseEqual(Logits(**int8_model, WeightPrecision::kInt8, tokens), reference));
    // Widened to fp32, the stored weights are their values q · scale: bitwise the fp32 logits
    // of a float file that stores those values (and not those of the original weights).
    ModelConfig float_config = (*int8_model)->config;
    float_config.weight_format = WeightFileFormat::kFloat;
    const std::string widened_dir = dir.Join("widened");
    ASSERT_TRUE(WriteModelDirectory(widened_dir, float_config, (*int8_model)->weights).ok());
    absl::StatusOr<std::unique_ptr<Model>> widened_model = LoadModel(widened_dir);
    ASSERT_TRUE(widened_model.ok()) << widened_model.status();
    const std::vector<float> widened = Logits(**int8_model, WeightPrecision::kFp32, tokens);
    EXPECT_TRUE(BitwiseEqual(widened, Logits(**widened_model, WeightPrecision::kFp32, tokens)));
    EXPECT_FALSE(BitwiseEqual(widened, fp32));
    BackendOptions bf16;
    bf16.weight_precision = WeightPrecision::kBf16;
    absl::StatusOr<std::unique_ptr<CpuBackend>> refused = CpuBackend::Create(**int8_model, bf16);
    ASSERT_FALSE(refused.ok());
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("weight_precision bf16"));
  }
}

}  // namespace
}  // namespace linserve
