// based_bench: the Based layer kinds on the CPU backend (issue 26), next to pure linear
// attention in the same run. bench/based/run.sh runs its three parts and
// bench/results/based.md records them. Models are built in memory with random weights
// (tests/testing/random_model.h); nothing is written to disk. Output: markdown on stdout.
//
//   --part=state       state bytes per session of the --configs (config.json files: the
//                      based-360m and based-1b shapes of bench/based/make_configs.py), from
//                      ModelConfig::StateFloatsPerSlot, by mixer kind, next to a softmax
//                      transformer's fp32 KV cache of the same d_model and layer count.
//   --part=context     decode step time at batch 1 against context (--contexts) for a small
//                      based-shaped model and its pure linear_attention peer.
//   --part=throughput  decode tokens/s at batch 1 and 32 for the --based_config shape (random
//                      weights) and a pure linear_attention model of similar parameter count,
//                      in --rounds interleaved rounds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_support.h"
#include "model/backend/backend.h"
#include "model/format/config.h"
#include "model/format/file_io.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, part, "", "Which figures: state, context or throughput (required).");
ABSL_FLAG(std::string, configs, "",
          "state: comma-separated config.json files (e.g. bench/based/based-360m.json,"
          "bench/based/based-1b.json).");
ABSL_FLAG(std::string, kv_contexts, "2048,8192,32768",
          "state: contexts of the softmax KV-cache columns, each in [1, 1 << 24].");
ABSL_FLAG(std::string, contexts, "128,1024,4096,16384,65536",
          "context: contexts to decode at, each in [1, 1 << 20].");
ABSL_FLAG(int32_t, context_steps, 64,
          "context: timed decode steps per model and context, in [1, 10000] (in rounds of 8).");
ABSL_FLAG(std::string, based_config, "",
          "throughput: the Based config.json (e.g. bench/based/based-360m.json); required.");
ABSL_FLAG(int32_t, rounds, 3, "throughput: interleaved rounds, in [1, 100].");
ABSL_FLAG(int32_t, prompt_tokens, 64,
          "throughput: tokens each session is prefilled with before decoding, in [1, 4096].");
ABSL_FLAG(int32_t, threads, 0, "CPU backend threads, in [0, 1024]; 0 = every core.");

namespace linserve {
namespace {

using bench::Clock;
using bench::FlagInRange;
using bench::Median;
using bench::Must;
using bench::ParseList;
using bench::Seconds;

ModelConfig ReadConfig(const std::string& path) {
  return Must(ParseModelConfig(Must(ReadFileToString(path)), path));
}

// A model in memory with random weights (MakeRandomWeights). No tokenizer: the backend does not
// use one, and MakeRandomModel builds only byte-tokenizer models.
Model RandomModel(const ModelConfig& config) {
  Model model;
  model.config = config;
  model.weights = MakeRandomWeights(config, 1);
  return model;
}

int64_t Parameters(const Model& model) {
  int64_t n = 0;
  ForEachTensor(model.config, model.weights, [&](const TensorSpec&, const Tensor& t) {
    n += static_cast<int64_t>(t.data.size());
  });
  return n;
}

std::vector<TokenId> RandomTokens(int64_t n, int32_t vocab, std::mt19937_64& rng) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// The based-360m layer pattern (linear attention at i % 5 == 1, sliding window at i % 5 == 2,
// short convolution elsewhere) on `n_layers` layers of width d_model = 64 · heads; d_inner and
// d_ff 2 · d_model as in based-360m; byte tokenizer (vocab 260), so the head is small and the
// layers dominate the step.
ModelConfig SmallBasedConfig(int heads, int n_layers, int window) {
  const int d = 64 * heads;
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < n_layers; ++i) {
    nlohmann::json mixer;
    if (i % 5 == 1) {
      mixer = {{"kind", "taylor_linear_attention"}, {"n_heads", heads}, {"feature_dim", 16},
               {"head_dim", 64}, {"eps", 1e-6}};
    } else if (i % 5 == 2) {
      mixer = {{"kind", "sliding_window_attention"}, {"n_heads", heads}, {"head_dim", 64},
               {"window", window}};
    } else {
      mixer = {{"kind", "short_conv"}, {"d_inner", 2 * d}};
    }
    layers.push_back({{"mixer", mixer},
                      {"norm", {{"kind", "rms_norm"}}},
                      {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 2 * d}}}});
  }
  const nlohmann::json config = {
      {"architecture", "linear_transformer"}, {"vocab_size", 260}, {"d_model", d},
      {"n_layers", n_layers}, {"norm", "pre"}, {"position", "none"}, {"tie_embeddings", true},
      {"tokenizer", "byte"}, {"bos_token_id", -1}, {"eos_token_id", 257},
      {"layers", layers}, {"final_norm", {{"kind", "rms_norm"}}}};
  return Must(ParseModelConfig(config.dump(), "small based config"));
}

// The pure linear-attention peer: the single-block schema (layer_norm, elu_plus_one linear
// attention with biases, GELU FFN), no position embeddings, tied head.
ModelConfig LinearPeerConfig(const ModelConfig& like, int heads, int d_ff) {
  ModelConfig c;
  c.vocab_size = like.vocab_size;
  c.tokenizer = like.tokenizer;
  c.eos_token_id = like.eos_token_id;
  c.d_model = like.d_model;
  c.n_layers = like.n_layers;
  c.n_heads = heads;
  c.head_dim = like.d_model / heads;
  c.feature_dim = c.head_dim;
  c.d_ff = d_ff;
  c.position = PositionEmbedding::kNone;
  c.tie_embeddings = true;
  return Must(ParseModelConfig(ModelConfigToJson(c), "linear peer config"));
}

std::string Mib(double bytes) {
  char s[64];
  std::snprintf(s, sizeof s, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return s;
}

// ---- state ---------------------------------------------------------------------------------

int StatePart() {
  const std::vector<int64_t> kv_contexts =
      ParseList("kv_contexts", absl::GetFlag(FLAGS_kv_contexts), 1, int64_t{1} << 24);
  const std::string list = absl::GetFlag(FLAGS_configs);
  if (list.empty()) {
    std::fprintf(stderr, "based_bench: --part=state needs --configs\n");
    return 2;
  }
  std::printf("| config | layers × d_model | state per session (fp32) | by mixer kind |");
  for (int64_t c : kv_contexts) std::printf(" softmax KV cache at %lld |", static_cast<long long>(c));
  std::printf("\n|---|---|---:|---|");
  for (size_t i = 0; i < kv_contexts.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (absl::string_view path : absl::StrSplit(list, ',')) {
    const ModelConfig config = ReadConfig(std::string(path));
    const std::vector<LayerSpec> layers = config.LayerList();
    const std::vector<int64_t> offsets = config.StateOffsets();
    std::map<std::string, std::pair<int, int64_t>> by_kind;  // kind → (layers, floats)
    for (size_t i = 0; i < layers.size(); ++i) {
      auto& [count, floats] = by_kind[layers[i].mixer.kind];
      ++count;
      floats += offsets[i + 1] - offsets[i];
    }
    std::string kinds;
    for (const auto& [kind, cf] : by_kind) {
      if (!kinds.empty()) kinds += "; ";
      kinds += kind + " ×" + std::to_string(cf.first) + ": " + Mib(4.0 * cf.second);
    }
    const double bytes = 4.0 * static_cast<double>(config.StateFloatsPerSlot());
    std::printf("| %s | %d × %d | **%s** (%lld B) | %s |", std::string(path).c_str(),
                config.n_layers, config.d_model, Mib(bytes).c_str(),
                static_cast<long long>(4 * config.StateFloatsPerSlot()), kinds.c_str());
    for (int64_t c : kv_contexts) {
      const double kv = 2.0 * config.n_layers * config.d_model * static_cast<double>(c) * 4.0;
      std::printf(" %s (%.1f×) |", Mib(kv).c_str(), kv / bytes);
    }
    std::printf("\n");
  }
  return 0;
}

// ---- context -------------------------------------------------------------------------------

// A model and its backend (which refers to the model: both stay where they are built).
struct Contender {
  std::string name;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
  SlotId prefix, probe;
  int64_t position = 0;
};

Contender MakeContender(std::string name, const ModelConfig& config) {
  Contender c;
  c.name = std::move(name);
  c.model = std::make_unique<Model>(RandomModel(config));
  return c;
}

// Decode steps of one session, each at context + i: a copy of the prefix prefilled to
// `context`, then 2 untimed steps and `steps` timed ones.
std::vector<double> DecodeAtContext(Contender& c, int steps, std::mt19937_64& rng) {
  Must(c.backend->CopySlot(c.prefix, c.probe));
  std::vector<float> logits(static_cast<size_t>(c.model->config.vocab_size));
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    const DecodeItem item{c.probe, static_cast<TokenId>(rng() % 256)};
    const auto t = Clock::now();
    Must(c.backend->Decode({&item, 1}, absl::MakeSpan(logits)));
    if (s >= 2) times.push_back(Seconds(t));
  }
  return times;
}

int ContextPart(int threads) {
  std::vector<int64_t> contexts =
      ParseList("contexts", absl::GetFlag(FLAGS_contexts), 1, int64_t{1} << 20);
  std::sort(contexts.begin(), contexts.end());
  const int steps = FlagInRange("context_steps", absl::GetFlag(FLAGS_context_steps), 1, 10000);
  const ModelConfig based = SmallBasedConfig(/*heads=*/6, /*n_layers=*/8, /*window=*/65);
  const ModelConfig peer = LinearPeerConfig(based, /*heads=*/6, /*d_ff=*/1280);
  std::vector<Contender> cs;
  cs.push_back(MakeContender("based (8 layers)", based));
  cs.push_back(MakeContender("linear_attention (8 layers)", peer));
  for (Contender& c : cs) {
    BackendOptions options;
    options.num_threads = threads;
    options.max_slots = 2;
    options.max_batch_size = 1;
    options.prefill_chunk_size = 256;
    c.backend = Must(CreateCpuBackend(*c.model, options));
    c.prefix = Must(c.backend->AllocateSlot());
    c.probe = Must(c.backend->AllocateSlot());
  }
  std::mt19937_64 rng(1);
  std::printf("Models (random weights, byte vocabulary 260, tied head, no position embeddings):\n");
  for (const Contender& c : cs) {
    std::printf("- %s: %.2f M parameters, state %s per session\n", c.name.c_str(),
                Parameters(*c.model) / 1e6,
                Mib(4.0 * c.model->config.StateFloatsPerSlot()).c_str());
  }
  std::printf("\n%d timed steps per model and context (rounds of 8, the models in turn), each "
              "from a copy of the session prefilled to the context.\n",
              steps);
  std::printf("\n| context | %s step, median (min) | %s step, median (min) | %s / %s, medians "
              "| prefill to context (%s / %s) |\n",
              cs[0].name.c_str(), cs[1].name.c_str(), cs[0].name.c_str(), cs[1].name.c_str(),
              cs[0].name.c_str(), cs[1].name.c_str());
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (int64_t context : contexts) {
    std::vector<double> prefill_s;
    for (Contender& c : cs) {
      std::fprintf(stderr, "%s: prefilling to %lld\n", c.name.c_str(),
                   static_cast<long long>(context));
      const std::vector<TokenId> tokens = RandomTokens(context - c.position, 256, rng);
      const auto t = Clock::now();
      Must(c.backend->Prefill(c.prefix, tokens, {}));
      prefill_s.push_back(Seconds(t));
      c.position = context;
    }
    // Rounds of 8 steps, the two models in turn, so that drift of a shared machine weighs on
    // both alike.
    std::vector<std::vector<double>> times(cs.size());
    for (int done = 0; done < steps; done += 8) {
      for (size_t i = 0; i < cs.size(); ++i) {
        const std::vector<double> t = DecodeAtContext(cs[i], std::min(8, steps - done), rng);
        times[i].insert(times[i].end(), t.begin(), t.end());
      }
    }
    const double a = 1e3 * Median(times[0]), b = 1e3 * Median(times[1]);
    const double a_min = 1e3 * *std::min_element(times[0].begin(), times[0].end());
    const double b_min = 1e3 * *std::min_element(times[1].begin(), times[1].end());
    std::printf("| %lld | %.3f ms (%.3f) | %.3f ms (%.3f) | %.2f | %.1f s / %.1f s |\n",
                static_cast<long long>(context), a, a_min, b, b_min, a / b, prefill_s[0],
                prefill_s[1]);
    std::fflush(stdout);
  }
  return 0;
}

// ---- throughput ----------------------------------------------------------------------------

int ThroughputPart(int threads) {
  const std::string path = absl::GetFlag(FLAGS_based_config);
  if (path.empty()) {
    std::fprintf(stderr, "based_bench: --part=throughput needs --based_config\n");
    return 2;
  }
  const int rounds = FlagInRange("rounds", absl::GetFlag(FLAGS_rounds), 1, 100);
  const int prompt = FlagInRange("prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens), 1, 4096);
  const ModelConfig based = ReadConfig(path);
  // Layer for layer the same parameter count as based-360m's mean layer: 16 heads × 64 and an
  // FFN of 3584 (4·d² + 2·d·3584 ≈ 11.5 M at d_model 1024).
  const ModelConfig peer = LinearPeerConfig(based, /*heads=*/16, /*d_ff=*/3584);
  constexpr int kMaxBatch = 32;
  std::vector<Contender> cs;
  std::fprintf(stderr, "building the models...\n");
  cs.push_back(MakeContender("based-360m shape", based));
  cs.push_back(MakeContender("linear_attention peer", peer));
  std::mt19937_64 rng(1);
  std::vector<std::vector<SlotId>> slots(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    Contender& c = cs[i];
    BackendOptions options;
    options.num_threads = threads;
    options.max_slots = kMaxBatch;
    options.max_batch_size = kMaxBatch;
    options.state_memory_budget_bytes = int64_t{kMaxBatch} * c.model->config.StateFloatsPerSlot() * 4;
    c.backend = Must(CreateCpuBackend(*c.model, options));
    for (int s = 0; s < kMaxBatch; ++s) {
      slots[i].push_back(Must(c.backend->AllocateSlot()));
      Must(c.backend->Prefill(slots[i].back(),
                              RandomTokens(prompt, c.model->config.vocab_size, rng), {}));
    }
  }
  std::printf("Models (random weights, vocab %d, tied head):\n", based.vocab_size);
  for (const Contender& c : cs) {
    std::printf("- %s: %.1f M parameters (%.2f GB fp32), state %s per session\n", c.name.c_str(),
                Parameters(*c.model) / 1e6, 4.0 * Parameters(*c.model) / 1e9,
                Mib(4.0 * c.model->config.StateFloatsPerSlot()).c_str());
  }
  // Per round, per batch, per model in turn: 2 untimed steps, then the median of `steps`.
  const std::vector<std::pair<int, int>> batches = {{1, 12}, {kMaxBatch, 4}};
  // step[b][i][round]
  std::vector<std::vector<std::vector<double>>> step(
      batches.size(), std::vector<std::vector<double>>(cs.size()));
  std::vector<float> logits(static_cast<size_t>(kMaxBatch) * based.vocab_size);
  for (int r = 0; r < rounds; ++r) {
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto [batch, steps] = batches[b];
      for (size_t i = 0; i < cs.size(); ++i) {
        std::fprintf(stderr, "round %d, batch %d, %s\n", r + 1, batch, cs[i].name.c_str());
        std::vector<double> times;
        for (int s = 0; s < steps + 2; ++s) {
          std::vector<DecodeItem> items;
          for (int k = 0; k < batch; ++k) {
            items.push_back({slots[i][k],
                             static_cast<TokenId>(rng() % static_cast<uint64_t>(based.vocab_size))});
          }
          const auto t = Clock::now();
          Must(cs[i].backend->Decode(
              items, absl::MakeSpan(logits).subspan(0, static_cast<size_t>(batch) *
                                                           based.vocab_size)));
          if (s >= 2) times.push_back(Seconds(t));
        }
        step[b][i].push_back(Median(times));
      }
    }
  }
  std::printf("\n| batch | %s tokens/s (step) | %s tokens/s (step) | %s / %s tokens/s, each round |\n",
              cs[0].name.c_str(), cs[1].name.c_str(), cs[0].name.c_str(), cs[1].name.c_str());
  std::printf("|---:|---:|---:|---|\n");
  for (size_t b = 0; b < batches.size(); ++b) {
    const int batch = batches[b].first;
    const double a = Median(step[b][0]), p = Median(step[b][1]);
    std::string each;
    for (int r = 0; r < rounds; ++r) {
      char s[32];
      std::snprintf(s, sizeof s, "%s%.2f", r ? ", " : "", step[b][1][r] / step[b][0][r]);
      each += s;
    }
    std::printf("| %d | %.1f (%.1f ms) | %.1f (%.1f ms) | %s |\n", batch, batch / a, 1e3 * a,
                batch / p, 1e3 * p, each.c_str());
  }
  return 0;
}

int Main() {
  const int threads = FlagInRange("threads", absl::GetFlag(FLAGS_threads), 0, 1024);
  const std::string part = absl::GetFlag(FLAGS_part);
  if (part == "state") return StatePart();
  if (part == "context") return ContextPart(threads);
  if (part == "throughput") return ThroughputPart(threads);
  std::fprintf(stderr, "based_bench: --part = '%s' is not one of state, context, throughput\n",
               part.c_str());
  return 2;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Benchmarks the Based layer kinds on the CPU backend next to pure linear attention; "
      "prints markdown (bench/based/run.sh).");
  absl::ParseCommandLine(argc, argv);
  // stdout is the report.
  spdlog::set_default_logger(spdlog::stderr_color_mt("based_bench"));
  return linserve::Main();
}
