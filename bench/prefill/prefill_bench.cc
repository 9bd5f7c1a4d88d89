// linserve-prefill-bench: the engine alone at prefill. For each prompt length and concurrency c
// it feeds c random prompts of that length to the backend, each whole in one PrefillAndSample
// call (what the engine can do at best: no scheduling, steps or transport), and reports the
// wall time and prompt tokens per second, the median of --rounds rounds. bench/prefill/run.sh
// sets the served time to first token and prefill throughput next to these figures.
//
// Output: one JSON object per (length, concurrency) on stdout (logs go to stderr), e.g.
//   {"tokens":8192,"concurrency":8,"seconds":13.1,"tokens_per_second":5002.6,"rounds":[...]}
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/backend/backend.h"
#include "model/backend/backend_factory.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, LINSERVE_DEFAULT_MODEL_DIR, "Model directory.");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or auto.");
ABSL_FLAG(std::string, lengths, "2048,8192,32768",
          "Comma-separated prompt lengths, tokens, each in [1, 1048576].");
ABSL_FLAG(std::string, concurrency, "1,8",
          "Comma-separated numbers of prompts fed per measurement, each in [1, 1024].");
ABSL_FLAG(int32_t, rounds, 3, "Measurements per point (the median is reported), in [1, 100].");
ABSL_FLAG(int32_t, threads, 0, "CPU backend threads, [0, 1024]; 0 = every core.");
ABSL_FLAG(int32_t, prefill_chunk_size, 64, "The backend's prefill chunk size.");
ABSL_FLAG(std::string, weight_precision, "bf16", "Weights on a GPU: bf16, fp16 or fp32.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the prompts.");

namespace linserve {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseList(absl::string_view flag, absl::string_view text,
                                               int32_t lo, int32_t hi) {
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not an integer in [", lo, ", ", hi, "]"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<WeightPrecision> ParsePrecision(const std::string& text) {
  if (text == "bf16") return WeightPrecision::kBf16;
  if (text == "fp16") return WeightPrecision::kFp16;
  if (text == "fp32") return WeightPrecision::kFp32;
  return absl::InvalidArgumentError(
      absl::StrCat("--weight_precision: \"", text, "\" is not one of bf16, fp16, fp32"));
}

// Seconds to feed `prompts` to fresh slots, one PrefillAndSample call each.
absl::StatusOr<double> FeedAll(Backend& backend, const std::vector<std::vector<TokenId>>& prompts) {
  std::vector<SlotId> slots;
  for (size_t i = 0; i < prompts.size(); ++i) {
    absl::StatusOr<SlotId> slot = backend.AllocateSlot();
    if (!slot.ok()) return slot.status();
    SamplingParams greedy;
    greedy.temperature = 0;
    if (absl::Status s = backend.StartSampling(*slot, greedy, 0, {}); !s.ok()) return s;
    slots.push_back(*slot);
  }
  TokenId token = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (absl::Status s =
            backend.PrefillAndSample(slots[i], prompts[i], {.tokens = {&token, 1}}, nullptr);
        !s.ok()) {
      return s;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (SlotId slot : slots) backend.FreeSlot(slot);
  return seconds;
}

absl::Status Run() {
  absl::StatusOr<std::vector<int32_t>> lengths =
      ParseList("lengths", absl::GetFlag(FLAGS_lengths), 1, 1 << 20);
  if (!lengths.ok()) return lengths.status();
  absl::StatusOr<std::vector<int32_t>> concurrency =
      ParseList("concurrency", absl::GetFlag(FLAGS_concurrency), 1, 1024);
  if (!concurrency.ok()) return concurrency.status();
  const int32_t rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1 || rounds > 100) {
    return absl::InvalidArgumentError(absl::StrCat("--rounds=", rounds, " is outside [1, 100]"));
  }
  absl::StatusOr<DeviceSelection> device = ParseDeviceSelection(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return device.status();
  absl::StatusOr<WeightPrecision> precision = ParsePrecision(absl::GetFlag(FLAGS_weight_precision));
  if (!precision.ok()) return precision.status();

  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return model.status();
  const ModelConfig& config = (*model)->config;
  const int32_t max_c = *std::max_element(concurrency->begin(), concurrency->end());
  BackendOptions options;
  options.max_slots = max_c;
  options.max_batch_size = std::max(max_c, 64);
  options.state_memory_budget_bytes = config.StateFloatsPerSlot() * 4 * max_c;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.prefill_chunk_size = absl::GetFlag(FLAGS_prefill_chunk_size);
  options.weight_precision = *precision;
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(**model, options, *device);
  if (!backend.ok()) return backend.status();

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  for (int32_t n : *lengths) {
    for (int32_t c : *concurrency) {
      std::vector<std::vector<TokenId>> prompts(static_cast<size_t>(c));
      for (auto& p : prompts) {
        p.resize(static_cast<size_t>(n));
        for (TokenId& t : p) t = static_cast<TokenId>(rng() % config.vocab_size);
      }
      // One untimed pass of up to 2048 tokens warms the buffers (and, on a GPU, the GEMM
      // plans).
      const std::vector<TokenId> warm(prompts[0].begin(),
                                      prompts[0].begin() + std::min<size_t>(n, 2048));
      if (absl::StatusOr<double> w = FeedAll(**backend, {warm}); !w.ok()) return w.status();
      std::vector<double> times;
      for (int32_t r = 0; r < rounds; ++r) {
        absl::StatusOr<double> t = FeedAll(**backend, prompts);
        if (!t.ok()) return t.status();
        times.push_back(*t);
        spdlog::info("{} tokens × {}: {:.3f} s", n, c, *t);
      }
      std::vector<double> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted[sorted.size() / 2];
      const nlohmann::json line = {
          {"tokens", n},       {"concurrency", c},
          {"seconds", median}, {"tokens_per_second", static_cast<double>(n) * c / median},
          {"rounds", times},
      };
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prefills prompts with the backend alone and prints time and tokens/s as JSON lines.");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("linserve-prefill-bench"));
  if (absl::Status s = linserve::Run(); !s.ok()) {
    std::fprintf(stderr, "linserve-prefill-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
