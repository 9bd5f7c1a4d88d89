#include "tests/testing/random_model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numbers>
#include <random>
#include <string_view>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "model/format/file_io.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/sliding_window_attention.h"
#include "model/layers/taylor_linear_attention.h"
#include "model/tokenizer/load_tokenizer.h"

namespace linserve {
namespace {

constexpr char kConfigFile[] = "config.json";
constexpr char kWeightsFile[] = "model.safetensors";

[[noreturn]] void Die(std::string_view message) {
  std::fprintf(stderr, "MakeRandomModel: %.*s\n", static_cast<int>(message.size()), message.data());
  std::abort();
}

// Standard normal samples from mt19937_64 by Box-Muller, written out so that the stream is the
// same with every standard library (std::normal_distribution's is not).
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  float operator()(float stddev) {
    // u1 in (0, 1] so the log is finite; u2 in [0, 1).
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;
    return static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(2.0 * std::numbers::pi * u2));
  }

 private:
  std::mt19937_64 rng_;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.head_dim = 8;
  c.feature_dim = 8;
  c.d_ff = 64;
  c.eos_token_id = 257;
  return c;
}

ModelConfig TinyBasedConfig() {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {
      .kind = "gated_mlp",
      .params = GatedMlpParams{.d_ff = 48, .activation = GateActivation::kSilu}.ToValues()};
  const ComponentSpec conv = {
      .kind = "short_conv",
      .params = ShortConvParams{.d_inner = 32, .kernel_size = 3, .conv_bias = true}.ToValues()};
  const ComponentSpec taylor = {
      .kind = "taylor_linear_attention",
      .params = TaylorLinearAttentionParams{.n_heads = 2, .feature_dim = 4, .head_dim = 16}
                    .ToValues()};
  const ComponentSpec window = {
      .kind = "sliding_window_attention",
      .params = SlidingWindowAttentionParams{.n_heads = 4, .head_dim = 8, .window = 4,
                                             .rotary_dim = 8}
                    .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 32;
  c.position = PositionEmbedding::kNone;
  c.eos_token_id = 257;
  for (const ComponentSpec& mixer : {conv, taylor, window, conv}) {
    c.layers.push_back({.mixer = mixer, .norm = norm, .mlp = mlp});
  }
  c.n_layers = static_cast<int32_t>(c.layers.size());
  c.final_norm = norm;
  // Through config.json text, so that the fields derived from the layers are filled in.
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "TinyBasedConfig");
  if (!parsed.ok()) Die(parsed.status().ToString());
  return *std::move(parsed);
}

ModelConfig TinyGatedDeltaNetConfig() {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {
      .kind = "gated_mlp",
      .params = GatedMlpParams{.d_ff = 48, .activation = GateActivation::kSilu}.ToValues()};
  const ComponentSpec gdn = {
      .kind = "gated_delta_net",
      .params = GatedDeltaNetParams{.n_heads = 2, .n_v_heads = 4, .head_k_dim = 8, .head_v_dim = 8}
                    .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 32;
  c.position = PositionEmbedding::kNone;
  c.eos_token_id = 257;
  c.tie_embeddings = false;
  c.layers = {{.mixer = gdn, .norm = norm, .mlp = mlp}, {.mixer = gdn, .norm = norm, .mlp = mlp}};
  c.n_layers = 2;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed =
      ParseModelConfig(ModelConfigToJson(c), "TinyGatedDeltaNetConfig");
  if (!parsed.ok()) Die(parsed.status().ToString());
  return *std::move(parsed);
}

ModelWeights MakeRandomWeights(const ModelConfig& config, uint64_t seed) {
  absl::StatusOr<ModelConfig> checked = ParseModelConfig(ModelConfigToJson(config), "config");
  if (!checked.ok()) Die(checked.status().ToString());
  Normal normal(seed);
  ModelWeights weights;
  const float d = static_cast<float>(config.d_model);
  ForEachTensorToFill(config, weights, [&](const TensorSpec& spec, Tensor& t) {
    float mean = 0.0f;
    float stddev;
    if (spec.name == "lm_head.weight") {
      // Logits are h · rowᵀ with h of unit variance per element (after a LayerNorm): rows of
      // variance 1/d give logits of variance ~1.
      stddev = 1.0f / std::sqrt(d);
    } else if (spec.name == "embed.weight") {
      // Untied, the embedding is only an input: unit scale, like the position signal. Tied, it
      // is also the head: d^-1/4 keeps tokens visible in the input while logits stay at a
      // standard deviation of d^1/4 (2.4 at d_model 32).
      stddev = config.tie_embeddings ? 1.0f / std::sqrt(std::sqrt(d)) : 1.0f;
    } else if (spec.name == "pos_embed.weight") {
      stddev = 0.5f;
    } else if (EndsWith(spec.name, "favor_projection")) {
      stddev = 1.0f;
    } else if (spec.shape.size() == 2) {
      stddev = 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));  // fan_in
    } else if (EndsWith(spec.name, "norm.weight") || EndsWith(spec.name, "ln1.weight") ||
               EndsWith(spec.name, "ln2.weight")) {
      mean = 1.0f;
      stddev = 0.1f;
    } else {
      stddev = 0.1f;  // biases, LayerNorm shifts
    }
    int64_t n = 1;
    for (int64_t dim : spec.shape) n *= dim;
    t.shape = spec.shape;
    t.data.resize(static_cast<size_t>(n));
    for (float& v : t.data) v = mean + normal(stddev);
  });
  return weights;
}

Model MakeRandomModel(const ModelConfig& config, uint64_t seed) {
  if (config.tokenizer != TokenizerKind::kByte && config.tokenizer != TokenizerKind::kNone) {
    Die("only byte-tokenizer and tokenizer-less configs can be built in memory (a SentencePiece "
        "model needs a tokenizer.model: use WriteModelDirectory and LoadModel)");
  }
  Model model;
  model.config = config;
  model.weights = MakeRandomWeights(config, seed);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(config, "");
  if (!tokenizer.ok()) Die(tokenizer.status().ToString());
  model.tokenizer = *std::move(tokenizer);
  absl::StatusOr<std::string> bytes = SerializeModelWeights(config, model.weights, Dtype::kF32);
  if (!bytes.ok()) Die(bytes.status().ToString());
  model.fingerprint = ModelFingerprint(ModelConfigToJson(config), *bytes);
  return model;
}

absl::Status WriteModelDirectory(const std::string& dir, const ModelConfig& config,
                                 const ModelWeights& weights, Dtype dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  }
  const std::filesystem::path path(dir);
  if (absl::Status s =
          WriteFileAtomically((path / kConfigFile).string(), ModelConfigToJson(config));
      !s.ok()) {
    return s;
  }
  return WriteModelWeights(config, weights, (path / kWeightsFile).string(), dtype);
}

}  // namespace linserve
