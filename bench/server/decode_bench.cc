// linserve-decode-bench: the engine alone. Drives the CPU backend's batched Decode plus one
// Sampler per session (what the server's engine thread does per step, without transport,
// scheduling or streaming) at a given batch size, and reports output tokens per second. The
// server overhead benchmark (bench/server/run.sh) compares linserve-loadtest against the
// server at concurrency B with this at batch B, same model, same thread count, same run.
//
// Output: one JSON object per batch size on stdout (logs go to stderr), e.g.
//   {"batch":8,"steps":1234,"seconds":5.0,"cpu_seconds":4.6,"tokens_per_second":1974.4}
// cpu_seconds is the process's CPU time over the timed decoding: below `seconds` when other
// work on the machine took the core away.
#include <time.h>

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
#include "model/model.h"
#include "model/backend/sampler.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, LINSERVE_DEFAULT_MODEL_DIR, "Model directory.");
ABSL_FLAG(std::string, batches, "1,8,32", "Comma-separated decode batch sizes, each in [1, 1024].");
ABSL_FLAG(double, seconds, 5.0, "Timed decoding per batch size, in (0, 3600].");
ABSL_FLAG(double, warmup_seconds, 1.0, "Untimed decoding before each measurement, in [0, 3600].");
ABSL_FLAG(int32_t, prompt_tokens, 16,
          "Random prompt tokens prefilled into every session first, in [1, 65536].");
ABSL_FLAG(int32_t, threads, 0, "CPU backend threads, [0, 1024]; 0 = every core.");
ABSL_FLAG(float, temperature, 1.0f, "Sampling temperature (0 = greedy), as the load test uses.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the prompts and of the samplers.");

namespace linserve {
namespace {

absl::Status CheckRange(absl::string_view flag, double value, double lo, double hi) {
  if (!(value >= lo && value <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", value, " is outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

struct Measurement {
  int64_t steps = 0;
  double seconds = 0;
  double cpu_seconds = 0;
};

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Decodes `slots` in one batch per step for `seconds`, sampling each row with its own Sampler
// and feeding the sampled token back in the next step.
absl::StatusOr<Measurement> DecodeFor(Backend& backend, std::vector<Sampler>& samplers,
                                      std::vector<DecodeItem>& batch, std::vector<float>& logits,
                                      double seconds) {
  const int32_t vocab = backend.config().vocab_size;
  Measurement m;
  const double cpu_start = ProcessCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (absl::Status s = backend.Decode(batch, absl::MakeSpan(logits)); !s.ok()) return s;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i].token = samplers[i].Sample(absl::MakeConstSpan(logits).subspan(i * vocab, vocab));
    }
    ++m.steps;
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  return m;
}

absl::Status Run() {
  std::vector<int32_t> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int32_t b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1 || b > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batches: \"", part, "\" is not an integer in [1, 1024]"));
    }
    batches.push_back(b);
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double warmup = absl::GetFlag(FLAGS_warmup_seconds);
  const int32_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  if (absl::Status s = CheckRange("seconds", seconds, 1e-3, 3600); !s.ok()) return s;
  if (absl::Status s = CheckRange("warmup_seconds", warmup, 0, 3600); !s.ok()) return s;
  if (absl::Status s = CheckRange("prompt_tokens", prompt_tokens, 1, 65536); !s.ok()) return s;

  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return model.status();
  const ModelConfig& config = (*model)->config;
  int32_t max_batch = 1;
  for (int32_t b : batches) max_batch = std::max(max_batch, b);
  BackendOptions options;
  options.max_slots = max_batch;
  options.max_batch_size = max_batch;
  options.state_memory_budget_bytes = config.StateFloatsPerSlot() * 4 * max_batch;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(**model, options);
  if (!backend.ok()) return backend.status();

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  for (int32_t b : batches) {
    std::vector<DecodeItem> batch;
    std::vector<Sampler> samplers;
    std::vector<float> logits(static_cast<size_t>(b) * config.vocab_size);
    std::vector<float> last(static_cast<size_t>(config.vocab_size));
    for (int32_t i = 0; i < b; ++i) {
      absl::StatusOr<SlotId> slot = (*backend)->AllocateSlot();
      if (!slot.ok()) return slot.status();
      std::vector<TokenId> prompt(static_cast<size_t>(prompt_tokens));
      for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % config.vocab_size);
      if (absl::Status s = (*backend)->Prefill(*slot, prompt, absl::MakeSpan(last)); !s.ok()) {
        return s;
      }
      SamplingParams params;
      params.temperature = absl::GetFlag(FLAGS_temperature);
      params.seed = rng();
      samplers.emplace_back(params);
      samplers.back().Observe(prompt);
      batch.push_back({*slot, samplers.back().Sample(last)});
    }
    if (warmup > 0) {
      if (auto w = DecodeFor(**backend, samplers, batch, logits, warmup); !w.ok()) {
        return w.status();
      }
    }
    absl::StatusOr<Measurement> m = DecodeFor(**backend, samplers, batch, logits, seconds);
    if (!m.ok()) return m.status();
    const nlohmann::json line = {
        {"batch", b},
        {"steps", m->steps},
        {"seconds", m->seconds},
        {"cpu_seconds", m->cpu_seconds},
        {"tokens_per_second", static_cast<double>(m->steps) * b / m->seconds},
    };
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    for (const DecodeItem& item : batch) (*backend)->FreeSlot(item.slot);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Decodes with the CPU backend alone at each --batches size and prints tokens/s as JSON "
      "lines.");
  absl::ParseCommandLine(argc, argv);
  // stdout carries the JSON lines only; the model loader's logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("linserve-decode-bench"));
  if (absl::Status s = linserve::Run(); !s.ok()) {
    std::fprintf(stderr, "linserve-decode-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
