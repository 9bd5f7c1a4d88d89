// families_bench: each linear-attention family linserve serves, on the CPU backend, next to the
// 2020 linear attention of the same width in the same run (issue 39). bench/families/run.sh runs
// both parts; bench/results/families.md records them. Models are built in memory with random
// weights (tests/testing/random_model.h); nothing is written to disk. Output: markdown on stdout.
//
//   --part=throughput  at the 125M-class shape (12 layers × d_model 768, the width of the
//                      linear model of bench/results/cpu.md; each family in its authors' block
//                      at that width, its parameters printed): decode tokens/s at batch 1 and
//                      --batch, prefill tokens/s of one --prompt_tokens prompt, and the state
//                      per session, in --rounds interleaved rounds.
//   --part=context     decode step time at batch 1 against context (--contexts) for 8-layer
//                      models of d_model 384, each family and the linear peer in turn.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_support.h"
#include "model/backend/backend.h"
#include "model/format/config.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, part, "", "Which figures: throughput or context (required).");
ABSL_FLAG(std::string, contexts, "128,1024,4096,16384,65536",
          "context: contexts to decode at, each in [1, 1 << 20].");
ABSL_FLAG(int32_t, context_steps, 48,
          "context: timed decode steps per model and context, in [1, 10000] (in rounds of 8).");
ABSL_FLAG(int32_t, rounds, 3, "throughput: interleaved rounds, in [1, 100].");
ABSL_FLAG(int32_t, batch, 32, "throughput: the larger decode batch, in [2, 1024].");
ABSL_FLAG(int32_t, prompt_tokens, 1024, "throughput: tokens of the timed prefill, in [1, 65536].");
ABSL_FLAG(int32_t, threads, 0, "CPU backend threads, in [0, 1024]; 0 = every core.");

namespace linserve {
namespace {

using bench::Clock;
using bench::FlagInRange;
using bench::Median;
using bench::Must;
using bench::ParseList;
using bench::Seconds;

// A family's shape at width d: the layer list of one model.
struct Family {
  std::string name;
  ModelConfig (*config)(int d, int n_layers);
};

nlohmann::json ByteModel(int d, int n_layers, nlohmann::json layers, nlohmann::json final_norm) {
  return {{"architecture", "linear_transformer"},
          {"vocab_size", 260},
          {"d_model", d},
          {"n_layers", n_layers},
          {"norm", "pre"},
          {"position", "none"},
          {"tie_embeddings", true},
          {"tokenizer", "byte"},
          {"bos_token_id", -1},
          {"eos_token_id", 257},
          {"layers", std::move(layers)},
          {"final_norm", std::move(final_norm)}};
}

// The 2020 linear transformer: heads of 64, elu_plus_one, LayerNorm, a GELU FFN of 4·d (the
// 125M shape of bench/results/cpu.md at d 768).
ModelConfig LinearConfig(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    layers.push_back(
        {{"mixer", {{"kind", "linear_attention"}, {"n_heads", d / 64}, {"head_dim", 64}}},
         {"norm", {{"kind", "layer_norm"}}},
         {"mlp", {{"kind", "ffn"}, {"d_ff", 4 * d}}}});
  }
  return Must(ParseModelConfig(ByteModel(d, n_layers, layers, {{"kind", "layer_norm"}}).dump(),
                               "linear_attention"));
}

// fla's Gated DeltaNet block at width d, with fla's allocation (q/k 0.75·d, v/g/o 1.5·d: about
// 6·d² per mixer): d/128 q/k heads of 96 (six at d 768), value heads of 192, conv 4, gate on;
// rms_norm; a SwiGLU gated_mlp of 8·d/3 (the FFN's parameters).
ModelConfig GatedDeltaNetConfig(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    layers.push_back({{"mixer",
                       {{"kind", "gated_delta_net"},
                        {"n_heads", d / 128},
                        {"head_k_dim", 96},
                        {"head_v_dim", 192}}},
                      {"norm", {{"kind", "rms_norm"}}},
                      {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 8 * d / 3}}}});
  }
  return Must(ParseModelConfig(ByteModel(d, n_layers, layers, {{"kind", "rms_norm"}}).dump(),
                               "gated_delta_net"));
}

// fla's DeltaNet block at width d with its defaults (expand_k = expand_v = 1, β from b_proj, no
// gate): d/64 heads of 64, conv 4; rms_norm; a SwiGLU gated_mlp of 8·d/3.
ModelConfig DeltaNetConfig(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    layers.push_back(
        {{"mixer",
          {{"kind", "delta_net"}, {"n_heads", d / 64}, {"head_k_dim", 64}, {"head_v_dim", 64}}},
         {"norm", {{"kind", "rms_norm"}}},
         {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 8 * d / 3}}}});
  }
  return Must(
      ParseModelConfig(ByteModel(d, n_layers, layers, {{"kind", "rms_norm"}}).dump(), "delta_net"));
}

// fla's GLA block at width d with its defaults (expand_k 0.5, expand_v 1, 4 heads: q/k heads of
// d/8 and value heads of d/4, gate rank 16 and normaliser 16, no short convolutions, the output
// gate); rms_norm; a SwiGLU gated_mlp of 8·d/3.
ModelConfig GatedLinearAttentionConfig(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    layers.push_back({{"mixer",
                       {{"kind", "gated_linear_attention"},
                        {"n_heads", 4},
                        {"head_k_dim", d / 8},
                        {"head_v_dim", d / 4}}},
                      {"norm", {{"kind", "rms_norm"}}},
                      {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 8 * d / 3}}}});
  }
  return Must(ParseModelConfig(ByteModel(d, n_layers, layers, {{"kind", "rms_norm"}}).dump(),
                               "gated_linear_attention"));
}

// fla's RetNet block at width d with its defaults (expand_k 1, expand_v 2: d/64 heads of 64 for
// q/k and 128 for v, the output gate); rms_norm; a SwiGLU gated_mlp of 8·d/3 (fla's hidden_ratio 2
// would give 4·d/3: the same MLP as the other families keeps the comparison to the mixer).
ModelConfig RetentionConfig(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    layers.push_back(
        {{"mixer",
          {{"kind", "retention"}, {"n_heads", d / 64}, {"head_k_dim", 64}, {"head_v_dim", 128}}},
         {"norm", {{"kind", "rms_norm"}}},
         {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 8 * d / 3}}}});
  }
  return Must(
      ParseModelConfig(ByteModel(d, n_layers, layers, {{"kind", "rms_norm"}}).dump(), "retention"));
}

// fla's Mamba-2 block at width d with its defaults (expand 2, heads of 64, state 128, one group,
// conv 4, D per head, the grouped gated norm) and no MLP: twice the layers for about the other
// families' parameters (as Mamba's own configurations double the depth).
ModelConfig Mamba2Config(int d, int n_layers) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 2 * n_layers; ++i) {
    layers.push_back(
        {{"mixer",
          {{"kind", "mamba2"}, {"n_heads", 2 * d / 64}, {"head_dim", 64}, {"state_size", 128}}},
         {"norm", {{"kind", "rms_norm"}}},
         {"mlp", {{"kind", "none"}}}});
  }
  return Must(ParseModelConfig(ByteModel(d, 2 * n_layers, layers, {{"kind", "rms_norm"}}).dump(),
                               "mamba2"));
}

const std::vector<Family>& Families() {
  static const std::vector<Family> families = {
      {"linear_attention", LinearConfig}, {"gated_delta_net", GatedDeltaNetConfig},
      {"delta_net", DeltaNetConfig},      {"gated_linear_attention", GatedLinearAttentionConfig},
      {"retention", RetentionConfig},     {"mamba2", Mamba2Config}};
  return families;
}

struct Contender {
  std::string name;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};

Contender Make(const Family& family, int d, int n_layers, int threads, int slots) {
  Contender c;
  c.name = family.name;
  c.model = std::make_unique<Model>();
  c.model->config = family.config(d, n_layers);
  c.model->weights = MakeRandomWeights(c.model->config, 1);
  BackendOptions options;
  options.num_threads = threads;
  options.max_slots = slots;
  options.max_batch_size = slots;
  c.backend = Must(CreateCpuBackend(*c.model, options));
  return c;
}

int64_t Parameters(const Model& model) {
  int64_t n = 0;
  ForEachTensor(model.config, model.weights, [&](const TensorSpec&, const Tensor& t) {
    n += static_cast<int64_t>(t.data.size());
  });
  return n;
}

std::vector<TokenId> RandomTokens(int64_t n, std::mt19937_64& rng) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % 256);
  return t;
}

std::string Kib(int64_t floats) {
  char s[64];
  std::snprintf(s, sizeof s, "%.1f KiB", 4.0 * static_cast<double>(floats) / 1024.0);
  return s;
}

// ---- throughput ----------------------------------------------------------------------------

// Seconds of one decode step of `slots` (each its own session).
double DecodeStep(Contender& c, const std::vector<SlotId>& slots, std::mt19937_64& rng) {
  std::vector<DecodeItem> items;
  for (SlotId s : slots) items.push_back({s, static_cast<TokenId>(rng() % 256)});
  std::vector<float> logits(slots.size() * static_cast<size_t>(c.model->config.vocab_size));
  const auto t = Clock::now();
  Must(c.backend->Decode(items, absl::MakeSpan(logits)));
  return Seconds(t);
}

int ThroughputPart(int threads) {
  const int rounds = FlagInRange("rounds", absl::GetFlag(FLAGS_rounds), 1, 100);
  const int batch = FlagInRange("batch", absl::GetFlag(FLAGS_batch), 2, 1024);
  const int prompt = FlagInRange("prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens), 1, 65536);
  std::vector<Contender> cs;
  for (const Family& f : Families()) cs.push_back(Make(f, 768, 12, threads, batch));
  std::mt19937_64 rng(1);
  std::vector<std::vector<SlotId>> slots(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    for (int s = 0; s < batch; ++s) {
      slots[i].push_back(Must(cs[i].backend->AllocateSlot()));
      Must(cs[i].backend->Prefill(slots[i].back(), RandomTokens(64, rng), {}));
    }
  }
  // Per contender: decode step seconds at batch 1 and `batch`, prefill seconds.
  std::vector<std::vector<double>> one(cs.size()), many(cs.size()), prefill(cs.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < cs.size(); ++i) {
      for (int s = 0; s < 10; ++s) one[i].push_back(DecodeStep(cs[i], {slots[i][0]}, rng));
      for (int s = 0; s < 3; ++s) many[i].push_back(DecodeStep(cs[i], slots[i], rng));
      const SlotId p = slots[i][1];
      Must(cs[i].backend->ResetSlot(p));
      const std::vector<TokenId> tokens = RandomTokens(prompt, rng);
      const auto t = Clock::now();
      Must(cs[i].backend->Prefill(p, tokens, {}));
      prefill[i].push_back(Seconds(t));
    }
  }
  std::printf(
      "| model (12 × 768, byte vocabulary) | parameters | state per session | decode "
      "tok/s, batch 1 | decode tok/s, batch %d | prefill tok/s (%d-token prompt) |\n",
      batch, prompt);
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < cs.size(); ++i) {
    std::printf("| %s | %.1f M | %s | %.1f | %.0f | %.0f |\n", cs[i].name.c_str(),
                Parameters(*cs[i].model) / 1e6,
                Kib(cs[i].model->config.StateFloatsPerSlot()).c_str(), 1.0 / Median(one[i]),
                batch / Median(many[i]), prompt / Median(prefill[i]));
  }
  std::printf("\nRatios to linear_attention (medians of %d rounds, the models in turn):\n\n",
              rounds);
  for (size_t i = 1; i < cs.size(); ++i) {
    std::printf("- %s: decode batch 1 %.2f×, batch %d %.2f×, prefill %.2f×\n", cs[i].name.c_str(),
                Median(one[0]) / Median(one[i]), batch, Median(many[0]) / Median(many[i]),
                Median(prefill[0]) / Median(prefill[i]));
  }
  return 0;
}

// ---- context -------------------------------------------------------------------------------

int ContextPart(int threads) {
  std::vector<int64_t> contexts =
      ParseList("contexts", absl::GetFlag(FLAGS_contexts), 1, int64_t{1} << 20);
  std::sort(contexts.begin(), contexts.end());
  const int steps = FlagInRange("context_steps", absl::GetFlag(FLAGS_context_steps), 1, 10000);
  std::vector<Contender> cs;
  for (const Family& f : Families()) cs.push_back(Make(f, 384, 8, threads, 2));
  std::vector<SlotId> prefix, probe;
  std::vector<int64_t> position(cs.size(), 0);
  for (Contender& c : cs) {
    prefix.push_back(Must(c.backend->AllocateSlot()));
    probe.push_back(Must(c.backend->AllocateSlot()));
  }
  std::mt19937_64 rng(1);
  std::printf("| context |");
  for (const Contender& c : cs) std::printf(" %s step, median (min) |", c.name.c_str());
  std::printf("\n|---:|");
  for (size_t i = 0; i < cs.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (int64_t context : contexts) {
    for (size_t i = 0; i < cs.size(); ++i) {
      std::fprintf(stderr, "%s: prefilling to %lld\n", cs[i].name.c_str(),
                   static_cast<long long>(context));
      Must(cs[i].backend->Prefill(prefix[i], RandomTokens(context - position[i], rng), {}));
      position[i] = context;
    }
    std::vector<std::vector<double>> times(cs.size());
    for (int done = 0; done < steps; done += 8) {
      for (size_t i = 0; i < cs.size(); ++i) {
        Must(cs[i].backend->CopySlot(prefix[i], probe[i]));
        for (int s = 0; s < std::min(8, steps - done) + 2; ++s) {
          const double t = DecodeStep(cs[i], {probe[i]}, rng);
          if (s >= 2) times[i].push_back(t);
        }
      }
    }
    std::printf("| %lld |", static_cast<long long>(context));
    for (size_t i = 0; i < cs.size(); ++i) {
      std::printf(" %.3f ms (%.3f) |", 1e3 * Median(times[i]),
                  1e3 * *std::min_element(times[i].begin(), times[i].end()));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

int Main() {
  const int threads = FlagInRange("threads", absl::GetFlag(FLAGS_threads), 0, 1024);
  const std::string part = absl::GetFlag(FLAGS_part);
  if (part == "throughput") return ThroughputPart(threads);
  if (part == "context") return ContextPart(threads);
  std::fprintf(stderr, "families_bench: --part = '%s' is not one of throughput, context\n",
               part.c_str());
  return 2;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Benchmarks each linear-attention family on the CPU backend next to the 2020 linear "
      "attention; prints markdown (bench/families/run.sh).");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("families_bench"));
  return linserve::Main();
}
