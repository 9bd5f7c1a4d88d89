// structured_bench: what structured output costs a decode step on the CPU backend (issue 27).
// bench/structured/run.sh runs it and bench/results/structured.md records a run. For each
// constraint case and batch size, in --rounds interleaved rounds, the same decode loop runs
// unconstrained (DecodeAndSample alone) and constrained (each row's token mask from its
// GrammarMatcher, DecodeAndSample with the masks, the pick accepted by the matcher; a row whose
// document is whole starts a new one). A case's compiled constraint, and so its mask cache,
// lives across its rounds, as a server's ConstraintCache keeps it across requests; the first
// round's mask time is reported apart (cold cache). Output: markdown on stdout.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
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
#include "model/model.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/grammar_matcher.h"
#include "server/constraints/token_vocabulary.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model_dir, "models/shakespeare-linear", "The model directory.");
ABSL_FLAG(std::string, batches, "1,64", "Decode batch sizes, each in [1, 256].");
ABSL_FLAG(int32_t, steps, 128, "Timed decode steps per run, in [1, 100000].");
ABSL_FLAG(int32_t, rounds, 3, "Interleaved rounds, in [2, 100] (the first warms the caches).");
ABSL_FLAG(int32_t, threads, 0, "CPU backend threads, in [0, 1024]; 0 = every core.");

namespace linserve {
namespace {

using bench::Clock;
using bench::Median;
using bench::Must;
using bench::Seconds;

struct Case {
  const char* name;
  ConstraintSpec spec;
};

std::vector<Case> Cases() {
  return {
      {"json_schema (object, 6 typed fields)",
       {ConstraintKind::kJsonSchema,
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
        R"("age":{"type":"integer"},"role":{"type":"string","enum":["king","queen","fool"]},)"
        R"("alive":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string",)"
        R"("maxLength":6},"minItems":1,"maxItems":3},"spouse":{"type":["string","null"]}},)"
        R"("required":["name","age","role","alive","tags","spouse"],"additionalProperties":false})"}},
      {"json_object", {ConstraintKind::kJsonObject, ""}},
      {"regex (a date)",
       {ConstraintKind::kRegex, R"((19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"}},
      {"grammar (play lines)",
       {ConstraintKind::kGrammar,
        "root ::= line line? line?\nline ::= speaker \": \" words \"\\n\"\n"
        "speaker ::= \"ROMEO\" | \"JULIET\" | \"NURSE\"\nwords ::= word (\" \" word){0,7}\n"
        "word ::= [a-z]{1,10}\n"}},
  };
}

struct Run {
  double seconds = 0;       // the whole loop
  double mask_seconds = 0;  // FillMask + Accept
  int64_t tokens = 0;
};

// `steps` decode steps of `slots` from `tokens`; with `constraint`, masked.
Run Decode(Backend& backend, absl::Span<const SlotId> slots, std::vector<TokenId>& tokens,
           const std::shared_ptr<const CompiledConstraint>& constraint, int32_t steps) {
  const size_t batch = slots.size();
  const int32_t words = constraint ? constraint->vocabulary().mask_words() : 0;
  std::vector<uint32_t> masks(batch * static_cast<size_t>(words));
  std::vector<GrammarMatcher> matchers;
  if (constraint) matchers.assign(batch, GrammarMatcher(constraint));
  std::vector<DecodeItem> items(batch);
  std::vector<TokenId> picked(batch);
  Run run;
  const Clock::time_point start = Clock::now();
  for (int32_t step = 0; step < steps; ++step) {
    const Clock::time_point mask_start = Clock::now();
    for (size_t i = 0; i < batch; ++i) {
      items[i] = {.slot = slots[i], .token = tokens[i]};
      if (!constraint) continue;
      uint32_t* mask = masks.data() + i * static_cast<size_t>(words);
      Must(matchers[i].FillMask(absl::MakeSpan(mask, static_cast<size_t>(words))));
      items[i].allowed_tokens = mask;
    }
    run.mask_seconds += constraint ? Seconds(mask_start) : 0;
    Must(backend.DecodeAndSample(items, {.tokens = absl::MakeSpan(picked)}));
    const Clock::time_point accept_start = Clock::now();
    for (size_t i = 0; i < batch; ++i) {
      tokens[i] = picked[i];
      if (!constraint) continue;
      Must(matchers[i].Accept(picked[i]));
      if (matchers[i].ended() || matchers[i].IsComplete()) matchers[i] = GrammarMatcher(constraint);
    }
    run.mask_seconds += constraint ? Seconds(accept_start) : 0;
  }
  run.seconds = Seconds(start);
  run.tokens = static_cast<int64_t>(batch) * steps;
  return run;
}

std::vector<int32_t> ParseList(const std::string& text, int32_t max) {
  std::vector<int32_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1 || value > max) {
      std::fprintf(stderr, "structured_bench: bad list entry \"%.*s\" (each in [1, %d])\n",
                   static_cast<int>(part.size()), part.data(), max);
      std::exit(2);
    }
    values.push_back(value);
  }
  return values;
}

int Main() {
  const std::vector<int32_t> batches = ParseList(absl::GetFlag(FLAGS_batches), 256);
  const int32_t steps = absl::GetFlag(FLAGS_steps);
  const int32_t rounds = absl::GetFlag(FLAGS_rounds);
  if (steps < 1 || steps > 100000 || rounds < 2 || rounds > 100) {
    std::fprintf(stderr, "structured_bench: --steps in [1, 100000], --rounds in [2, 100]\n");
    return 2;
  }
  const std::unique_ptr<Model> model = Must(LoadModel(absl::GetFlag(FLAGS_model_dir)));
  BackendOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.max_batch_size = *std::max_element(batches.begin(), batches.end());
  options.max_slots = options.max_batch_size;
  const std::unique_ptr<Backend> backend = Must(CreateCpuBackend(*model, options));
  const std::shared_ptr<const TokenVocabulary> vocabulary =
      TokenVocabulary::Create(*model->tokenizer, model->config.eos_token_id);
  const std::vector<TokenId> prompt = Must(model->tokenizer->Encode("JSON:\n"));

  std::printf("Model %s (vocabulary %d), %d timed steps per run, %d rounds (medians of rounds "
              "2..%d; round 1 warms the mask cache).\n\n",
              absl::GetFlag(FLAGS_model_dir).c_str(), vocabulary->vocab_size(), steps, rounds,
              rounds);
  std::printf("| case | batch | step ms, unconstrained | step ms, constrained | mask µs per row, "
              "cold cache (round 1) | mask µs per row, warm | constrained / unconstrained "
              "tok/s |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Case& c : Cases()) {
    const std::shared_ptr<const CompiledConstraint> constraint =
        Must(CompileConstraint(c.spec, vocabulary, ConstraintLimits{}, "bench"));
    for (int32_t batch : batches) {
      std::vector<SlotId> slots;
      std::vector<TokenId> tokens;
      for (int32_t i = 0; i < batch; ++i) {
        const SlotId slot = Must(backend->AllocateSlot());
        Must(backend->Prefill(slot, absl::MakeConstSpan(prompt).first(prompt.size() - 1), {}));
        SamplingParams params;
        params.seed = static_cast<uint64_t>(i);
        Must(backend->StartSampling(slot, params, 0, {}));
        slots.push_back(slot);
        tokens.push_back(prompt.back());
      }
      std::vector<double> plain_step, masked_step, warm_mask, ratio;
      double cold_mask = 0;
      for (int32_t round = 0; round < rounds; ++round) {
        const Run plain = Decode(*backend, slots, tokens, nullptr, steps);
        const Run masked = Decode(*backend, slots, tokens, constraint, steps);
        const double mask_us = 1e6 * masked.mask_seconds / static_cast<double>(masked.tokens);
        if (round == 0) {
          cold_mask = mask_us;
          continue;
        }
        plain_step.push_back(1e3 * plain.seconds / steps);
        masked_step.push_back(1e3 * masked.seconds / steps);
        warm_mask.push_back(mask_us);
        ratio.push_back(plain.seconds / masked.seconds);
      }
      std::printf("| %s | %d | %.3f | %.3f | %.1f | %.1f | %.1f%% |\n", c.name, batch,
                  Median(plain_step), Median(masked_step), cold_mask, Median(warm_mask),
                  100 * Median(ratio));
      std::fflush(stdout);
      for (SlotId slot : slots) backend->FreeSlot(slot);
    }
  }
  return 0;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The cost of structured output on the CPU decode step.");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);  // the model's and backend's start lines are no table
  return linserve::Main();
}
