#include "server/engine/request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"

namespace linserve {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

absl::Status CheckTokenIds(const std::vector<TokenId>& ids, absl::string_view field,
                           int32_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     absl::StrCat("token id ", ids[i], " is outside the vocabulary [0, ",
                                  vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSampling(const SamplingParams& p, int32_t vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return Invalid("sampling.temperature",
                   absl::StrCat("must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return Invalid("sampling.top_k", absl::StrCat("must be >= 0 (0 = off), got ", p.top_k));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return Invalid("sampling.top_p", absl::StrCat("must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0 && p.min_p <= 1)) {
    return Invalid("sampling.min_p", absl::StrCat("must be in [0, 1], got ", p.min_p));
  }
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0)) {
    return Invalid("sampling.repetition_penalty",
                   absl::StrCat("must be finite and > 0, got ", p.repetition_penalty));
  }
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) {
    return Invalid("sampling.presence_penalty",
                   absl::StrCat("must be in [-2, 2], got ", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) {
    return Invalid("sampling.frequency_penalty",
                   absl::StrCat("must be in [-2, 2], got ", p.frequency_penalty));
  }
  // Their messages start with "logit_bias: ".
  for (const absl::Status& status :
       {ValidateLogitBias(p.logit_bias), CheckLogitBiasVocabulary(p.logit_bias, vocab_size)}) {
    if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat("sampling.", status.message()));
  }
  // The sampler's own contract is the final word; its message names the SamplingParams field.
  if (absl::Status status = ValidateSamplingParams(p); !status.ok()) {
    return Invalid("sampling", status.message());
  }
  return absl::OkStatus();
}

absl::Status CheckChoices(const GenerateRequest& request, const RequestLimits& limits) {
  if (request.n < 1 || request.n > limits.max_choices) {
    return Invalid("n", absl::StrCat("must be in [1, ", limits.max_choices, "] (max_choices), got ",
                                     request.n));
  }
  if (request.n > 1 && request.max_new_tokens == 0) {
    return Invalid("n", "more than one choice needs max_new_tokens >= 1");
  }
  if (request.n > 1 && request.prompt_logprobs >= 0) {
    return Invalid("n", "more than one choice cannot be combined with prompt_logprobs (the "
                        "prompt's logprobs are the same for every choice: ask with n = 1)");
  }
  if (request.session_choice.has_value()) {
    if (!request.session_id.has_value() || request.n == 1) {
      return Invalid("session_choice", "only with a session_id and n > 1");
    }
    if (*request.session_choice < 0 || *request.session_choice >= request.n) {
      return Invalid("session_choice", absl::StrCat("must be in [0, n) = [0, ", request.n,
                                                    "), got ", *request.session_choice));
    }
  } else if (request.session_id.has_value() && request.n > 1) {
    return Invalid("n", "with a session_id, n > 1 needs session_choice: which choice the "
                        "session continues with (the session keeps one history)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits,
                                     const ModelConfig& config) {
  if (request.prompt.empty()) return Invalid("prompt", "must not be empty");
  if (request.prompt.size() > static_cast<size_t>(limits.max_prompt_tokens)) {
    return Invalid("prompt", absl::StrCat(request.prompt.size(), " tokens exceed the limit of ",
                                          limits.max_prompt_tokens));
  }
  if (absl::Status s = CheckTokenIds(request.prompt, "prompt.token_ids", config.vocab_size);
      !s.ok()) {
    return s;
  }
  if (request.max_new_tokens < 0 || request.max_new_tokens > limits.max_new_tokens) {
    return Invalid("max_new_tokens", absl::StrCat("must be in [0, ", limits.max_new_tokens,
                                                  "], got ", request.max_new_tokens));
  }
  if (absl::Status s = CheckSampling(request.sampling, config.vocab_size); !s.ok()) return s;
  if (request.stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return Invalid("stop", absl::StrCat(request.stop.size(), " stop strings exceed the limit of ",
                                        limits.max_stop_strings));
  }
  if (!request.stop.empty() && config.tokenizer == TokenizerKind::kNone) {
    return Invalid("stop",
                   "this model has no tokenizer (config.json tokenizer \"none\"): its "
                   "tokens stand for no text, so no stop string can match; use "
                   "stop_token_ids");
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    const std::string& stop = request.stop[i];
    if (stop.empty()) return Invalid(absl::StrCat("stop[", i, "]"), "must not be empty");
    if (stop.size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return Invalid(absl::StrCat("stop[", i, "]"),
                     absl::StrCat(stop.size(), " bytes exceed the limit of ",
                                  limits.max_stop_string_bytes));
    }
  }
  if (request.stop_token_ids.size() > static_cast<size_t>(limits.max_stop_token_ids)) {
    return Invalid("stop_token_ids",
                   absl::StrCat(request.stop_token_ids.size(), " ids exceed the limit of ",
                                limits.max_stop_token_ids));
  }
  if (absl::Status s = CheckTokenIds(request.stop_token_ids, "stop_token_ids", config.vocab_size);
      !s.ok()) {
    return s;
  }
  if (request.ignore_eos && request.constraint != nullptr) {
    return Invalid("ignore_eos", "cannot be combined with a constraint");
  }
  const int32_t max_logprobs = std::min(limits.max_top_logprobs, config.vocab_size);
  if (request.top_logprobs < 0 || request.top_logprobs > max_logprobs) {
    return Invalid("top_logprobs", absl::StrCat("must be in [0, ", max_logprobs, "], got ",
                                                request.top_logprobs));
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > max_logprobs) {
    return Invalid("prompt_logprobs", absl::StrCat("must be in [0, ", max_logprobs,
                                                   "] (or unset), got ", request.prompt_logprobs));
  }
  return CheckChoices(request, limits);
}

absl::Status ValidateRequestLimits(const RequestLimits& limits) {
  const std::pair<absl::string_view, int64_t> fields[] = {
      {"max_new_tokens", limits.max_new_tokens},
      {"max_prompt_tokens", limits.max_prompt_tokens},
      {"max_prompt_bytes", limits.max_prompt_bytes},
      {"max_stop_strings", limits.max_stop_strings},
      {"max_stop_string_bytes", limits.max_stop_string_bytes},
      {"max_stop_token_ids", limits.max_stop_token_ids},
      {"max_top_logprobs", limits.max_top_logprobs},
      {"max_choices", limits.max_choices},
  };
  for (const auto& [name, value] : fields) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("request limit ", name, " must be >= 1, got ", value));
    }
  }
  if (limits.max_top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("request limit max_top_logprobs must be <= ", kMaxTopLogprobs,
                     " (what a backend returns per token), got ", limits.max_top_logprobs));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenId>> TokenizeText(std::string_view text, absl::string_view field,
                                                  const Tokenizer& tokenizer,
                                                  const RequestLimits& limits) {
  if (text.size() > static_cast<uint64_t>(limits.max_prompt_bytes)) {
    return Invalid(field, absl::StrCat(text.size(), " bytes exceed the limit of ",
                                       limits.max_prompt_bytes, " (max_prompt_bytes)"));
  }
  const size_t max_tokens = static_cast<size_t>(limits.max_prompt_tokens);
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer.EncodeAtMost(text, max_tokens);
  if (!ids.ok()) {
    return Invalid(field, absl::StrCat("cannot be tokenized: ", ids.status().message()));
  }
  if (ids->size() > max_tokens) {
    return Invalid(field, absl::StrCat("has more tokens than the limit of ", max_tokens,
                                       " (max_prompt_tokens)"));
  }
  return ids;
}

}  // namespace linserve
