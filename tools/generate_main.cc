// linserve-generate: the offline generator. Loads a model directory, feeds the prompt through the
// CPU backend's chunked prefill, then samples and decodes one token at a time, streaming the text
// to stdout as soon as each UTF-8 character is complete (a model without a tokenizer: the ids,
// space-separated). Diagnostics and timing go to stderr.
// Exit status: 0 on success, 1 on any error (bad flag, unreadable model, ...).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "model/model.h"
#include "model/tokenizer/tokenizer.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, LINSERVE_DEFAULT_MODEL_DIR,
          "Model directory: config.json, model.safetensors and, for SentencePiece models, "
          "tokenizer.model.");
ABSL_FLAG(std::string, prompt, "",
          "Text to continue. The model's bos_token_id, if it has one, is put in front; an empty "
          "prompt is allowed only then.");
ABSL_FLAG(std::vector<std::string>, token_ids, {},
          "The prompt as token ids (ID,ID,...) instead of --prompt's text; the only prompt a "
          "model without a tokenizer takes. The bos_token_id is put in front as for text.");
ABSL_FLAG(int32_t, max_new_tokens, 256, "Tokens to generate, in [0, 1048576].");
ABSL_FLAG(float, temperature, 1.0f,
          "Sampling temperature, >= 0; 0 = greedy (argmax, no randomness).");
ABSL_FLAG(int32_t, top_k, 0, "Sample only among the k most likely tokens; 0 = off.");
ABSL_FLAG(float, top_p, 1.0f,
          "Nucleus sampling: the smallest set of tokens whose probability reaches top_p, in "
          "(0, 1]; 1 = off.");
ABSL_FLAG(float, min_p, 0.0f,
          "Drop tokens less likely than min_p times the most likely one, in [0, 1]; 0 = off.");
ABSL_FLAG(float, repetition_penalty, 1.0f,
          "Divide positive (multiply negative) logits of tokens already seen (prompt or "
          "output) by this, > 0; 1 = off.");
ABSL_FLAG(float, presence_penalty, 0.0f,
          "Subtracted once from the logit of every token already seen, in [-2, 2].");
ABSL_FLAG(float, frequency_penalty, 0.0f,
          "Subtracted from a seen token's logit once per occurrence, in [-2, 2].");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the sampler's random stream: same seed, same text.");
ABSL_FLAG(int32_t, chunk_size, 64, "Prompt tokens per chunk of the parallel prefill, [1, 4096].");
ABSL_FLAG(int32_t, threads, 0, "CPU threads, [0, 1024]; 0 = every core.");
ABSL_FLAG(bool, stop_at_eos, true,
          "Stop when the model produces its eos_token_id (the token itself is not printed).");

namespace linserve {
namespace {

constexpr int32_t kMaxNewTokens = 1 << 20;

absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " = ", value, " is outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFlags() {
  if (absl::Status s = CheckFlagRange("max_new_tokens", absl::GetFlag(FLAGS_max_new_tokens), 0,
                                      kMaxNewTokens);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFlagRange("chunk_size", absl::GetFlag(FLAGS_chunk_size), 1, 4096);
      !s.ok()) {
    return s;
  }
  return CheckFlagRange("threads", absl::GetFlag(FLAGS_threads), 0, 1024);
}

SamplingParams SamplingFromFlags() {
  SamplingParams p;
  p.temperature = absl::GetFlag(FLAGS_temperature);
  p.top_k = absl::GetFlag(FLAGS_top_k);
  p.top_p = absl::GetFlag(FLAGS_top_p);
  p.min_p = absl::GetFlag(FLAGS_min_p);
  p.repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty);
  p.presence_penalty = absl::GetFlag(FLAGS_presence_penalty);
  p.frequency_penalty = absl::GetFlag(FLAGS_frequency_penalty);
  p.seed = absl::GetFlag(FLAGS_seed);
  return p;
}

// The prompt --prompt or --token_ids gives (without the BOS).
absl::StatusOr<std::vector<TokenId>> PromptFromFlags(const Tokenizer& tokenizer) {
  const std::vector<std::string> ids = absl::GetFlag(FLAGS_token_ids);
  if (ids.empty()) {
    absl::StatusOr<std::vector<TokenId>> encoded = tokenizer.Encode(absl::GetFlag(FLAGS_prompt));
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt: ", encoded.status().message()));
    }
    return encoded;
  }
  if (!absl::GetFlag(FLAGS_prompt).empty()) {
    return absl::InvalidArgumentError("give --prompt or --token_ids, not both");
  }
  std::vector<TokenId> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = -1;
    if (!absl::SimpleAtoi(ids[i], &id) || id < 0 || id >= tokenizer.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--token_ids[", i, "] = \"", ids[i], "\" is not a token id in [0, vocab_size) = [0, ",
          tokenizer.vocab_size(), ")"));
    }
    out.push_back(id);
  }
  return out;
}

void Emit(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

absl::Status Generate() {
  if (absl::Status s = CheckFlags(); !s.ok()) return s;
  const SamplingParams sampling = SamplingFromFlags();
  if (absl::Status s = ValidateSamplingParams(sampling); !s.ok()) {
    // The sampler names its fields exactly like the flags.
    return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
  }

  const std::string dir = absl::GetFlag(FLAGS_model);
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("--model ", dir, ": ", model.status().message()));
  }
  const ModelConfig& config = (*model)->config;

  std::vector<TokenId> prompt;
  if (config.bos_token_id >= 0) prompt.push_back(config.bos_token_id);
  absl::StatusOr<std::vector<TokenId>> given = PromptFromFlags(*(*model)->tokenizer);
  if (!given.ok()) return given.status();
  prompt.insert(prompt.end(), given->begin(), given->end());
  if (prompt.empty()) {
    return absl::InvalidArgumentError(
        "--prompt is empty and the model has no bos_token_id to start from");
  }
  int64_t max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (config.position == PositionEmbedding::kLearned) {
    const int64_t room = config.max_position - static_cast<int64_t>(prompt.size());
    if (room < 0) {
      return absl::OutOfRangeError(absl::StrCat(
          "--prompt is ", prompt.size(), " tokens; the model's learned positions end at ",
          config.max_position));
    }
    // The last sampled token is printed but never fed back, hence room + 1.
    if (max_new_tokens > room + 1) {
      spdlog::warn("--max_new_tokens {} capped to {}: the model's learned positions end at {}",
                   max_new_tokens, room + 1, config.max_position);
      max_new_tokens = room + 1;
    }
  }

  BackendOptions options;
  options.state_memory_budget_bytes = config.StateFloatsPerSlot() * 4;
  options.max_slots = 1;
  options.max_batch_size = 1;
  options.prefill_chunk_size = absl::GetFlag(FLAGS_chunk_size);
  options.num_threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(**model, options);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<SlotId> slot = (*backend)->AllocateSlot();
  if (!slot.ok()) return slot.status();

  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  const auto prefill_start = std::chrono::steady_clock::now();
  if (absl::Status s = (*backend)->Prefill(*slot, prompt, absl::MakeSpan(logits)); !s.ok()) {
    return s;
  }
  const double prefill_seconds = Seconds(prefill_start);

  Sampler sampler(sampling);
  sampler.Observe(prompt);
  StreamingDetokenizer detokenizer(*(*model)->tokenizer);
  const bool ids_only = !(*model)->tokenizer->has_text();
  const bool stop_at_eos = absl::GetFlag(FLAGS_stop_at_eos);
  const auto decode_start = std::chrono::steady_clock::now();
  int64_t generated = 0;
  while (generated < max_new_tokens) {
    const TokenId token = sampler.Sample(logits);
    if (stop_at_eos && token == config.eos_token_id) break;
    Emit(ids_only ? absl::StrCat(generated == 0 ? "" : " ", token) : detokenizer.Push(token));
    ++generated;
    if (generated == max_new_tokens) break;
    const DecodeItem item{*slot, token};
    if (absl::Status s = (*backend)->Decode({&item, 1}, absl::MakeSpan(logits)); !s.ok()) {
      return s;
    }
  }
  Emit(detokenizer.Flush());
  const double decode_seconds = Seconds(decode_start);
  std::fprintf(stderr,
               "\n[prompt: %zu tokens in %.3f s (%.1f tokens/s); generated: %lld tokens in "
               "%.3f s (%.1f tokens/s)]\n",
               prompt.size(), prefill_seconds, prompt.size() / prefill_seconds,
               static_cast<long long>(generated), decode_seconds,
               decode_seconds > 0 ? generated / decode_seconds : 0.0);
  return absl::OkStatus();
}

}  // namespace
}  // namespace linserve

namespace linserve {
namespace {

constexpr char kUsage[] =
    "Generates text with a linear-attention model on the CPU, streaming it to stdout.\n"
    "Usage: linserve-generate [--model DIR] (--prompt TEXT | --token_ids ID,...) [sampling "
    "flags]\n"
    "Exit status: 0 on success, 1 on any error.";

// --help lists this program's flags (absl's own --help filters by file name and exits 1).
bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-help") == 0 ||
        std::strcmp(argv[i], "-h") == 0) {
      return true;
    }
  }
  return false;
}

void PrintHelp() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "generate_main.cc")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string text = absl::StrCat(kUsage, "\n\nFlags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(&text, "  --", flag->Name(), "  ", flag->Help(), "\n      default: ",
                    flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(), "\n");
  }
  std::fputs(text.c_str(), stdout);
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  if (linserve::WantsHelp(argc, argv)) {
    linserve::PrintHelp();
    return 0;
  }
  absl::SetProgramUsageMessage(linserve::kUsage);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "linserve-generate: unexpected argument '%s' (flags look like --name=value; "
                 "see --help)\n",
                 positional[1]);
    return 1;
  }
  // stdout carries only the generated text.
  spdlog::set_default_logger(spdlog::stderr_color_mt("linserve-generate"));
  spdlog::set_pattern("[%l] %v");
  spdlog::set_level(spdlog::level::warn);
  if (absl::Status s = linserve::Generate(); !s.ok()) {
    std::fprintf(stderr, "linserve-generate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
