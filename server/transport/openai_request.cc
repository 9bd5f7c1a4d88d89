#include "server/transport/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "model/format/json_parse.h"
#include "nlohmann/json.hpp"
#include "server/sessions/session_id.h"
#include "server/transport/openai_constraint.h"
#include "server/transport/openai_json_fields.h"
#include "server/transport/random_seed.h"

namespace linserve {
namespace {

using nlohmann::json;

// The text of a chat message's content: a string, or an array of {"type": "text", "text"}
// parts (concatenated).
absl::StatusOr<std::string> MessageContent(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return InvalidField(field, "must be a string or an array of {\"type\": \"text\"} parts");
  }
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_field = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return InvalidField(part_field, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return InvalidField(absl::StrCat(part_field, ".type"),
                          "only \"text\" parts are supported by this model");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return InvalidField(absl::StrCat(part_field, ".text"), "required: a string");
    }
    out += text->get<std::string>();
  }
  return out;
}

absl::StatusOr<std::vector<TokenId>> ChatPrompt(const json& body, const OpenAiContext& context) {
  if (context.chat_template == nullptr) {
    return InvalidField("messages",
                        absl::StrCat("the model \"", context.model_id, "\" has no chat template (",
                                     kChatTemplateFile, " in its directory): use /v1/completions"));
  }
  const json* messages = JsonMember(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return InvalidField("messages", "required: a non-empty array of messages");
  }
  std::vector<ChatMessage> parsed;
  int64_t bytes = 0;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return InvalidField(field, "must be an object");
    ChatMessage message;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return InvalidField(absl::StrCat(field, ".role"), "required: a string");
    }
    message.role = role->get<std::string>();
    if (!context.chat_template->HasRole(message.role)) {
      return InvalidField(absl::StrCat(field, ".role"),
                          absl::StrCat("\"", message.role,
                                       "\" is not a role of this model's chat "
                                       "template"));
    }
    if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
      if (!name->is_string()) return InvalidField(absl::StrCat(field, ".name"), "must be a string");
      message.name = name->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return InvalidField(absl::StrCat(field, ".content"), "required");
    }
    absl::StatusOr<std::string> text = MessageContent(*content, absl::StrCat(field, ".content"));
    if (!text.ok()) return text.status();
    message.content = *std::move(text);
    bytes += static_cast<int64_t>(message.content.size() +
                                  (message.name.has_value() ? message.name->size() : 0));
    if (bytes > context.limits.max_prompt_bytes) {
      return InvalidField("messages", absl::StrCat("more than ", context.limits.max_prompt_bytes,
                                                   " bytes of text exceed the limit "
                                                   "(max_prompt_bytes)"));
    }
    parsed.push_back(std::move(message));
  }
  return TokenizeText(context.chat_template->Apply(parsed), "messages", *context.tokenizer,
                      context.limits);
}

absl::StatusOr<std::vector<TokenId>> TokenIds(const json& ids, absl::string_view field,
                                              const RequestLimits& limits) {
  if (ids.size() > static_cast<size_t>(limits.max_prompt_tokens)) {
    return InvalidField(field, absl::StrCat(ids.size(), " token ids exceed the limit of ",
                                            limits.max_prompt_tokens, " (max_prompt_tokens)"));
  }
  std::vector<TokenId> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 ||
        ids[i].get<int64_t>() > std::numeric_limits<TokenId>::max()) {
      return InvalidField(absl::StrCat(field, "[", i, "]"), "must be a token id (an integer >= 0)");
    }
    out.push_back(static_cast<TokenId>(ids[i].get<int64_t>()));
  }
  return out;
}

// A completion prompt: a string, an array of token ids, or an array holding one of those
// (several prompts would be several choices, which this server does not serve).
absl::StatusOr<std::vector<TokenId>> CompletionPrompt(const json& body,
                                                      const OpenAiContext& context) {
  const json* prompt = JsonMember(body, "prompt");
  if (prompt == nullptr) return InvalidField("prompt", "required");
  const json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    if (prompt->size() != 1) {
      return InvalidField("prompt",
                          absl::StrCat("holds ", prompt->size(),
                                       " prompts; this server completes one per request"));
    }
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    if (one->get_ref<const std::string&>().empty()) {
      return InvalidField("prompt", "must not be empty");
    }
    return TokenizeText(one->get_ref<const std::string&>(), "prompt", *context.tokenizer,
                        context.limits);
  }
  if (one->is_array()) {
    if (one->empty()) return InvalidField("prompt", "must not be empty");
    return TokenIds(*one, "prompt", context.limits);
  }
  return InvalidField("prompt",
                      "must be a string, an array of token ids, or an array of one of them");
}

absl::Status ParseStop(const json& body, const RequestLimits& limits, GenerateRequest& out) {
  const json* stop = JsonMember(body, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    out.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > static_cast<size_t>(limits.max_stop_strings)) {
      return InvalidField("stop", absl::StrCat(stop->size(), " stop strings exceed the limit of ",
                                               limits.max_stop_strings, " (max_stop_strings)"));
    }
    for (size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) {
        return InvalidField(absl::StrCat("stop[", i, "]"), "must be a string");
      }
      out.stop.push_back((*stop)[i].get<std::string>());
    }
  } else {
    return InvalidField("stop", "must be a string or an array of strings");
  }
  return absl::OkStatus();
}

// Sets `field` of `out` from the number `name` when present.
template <typename T>
absl::Status SetNumber(const json& body, const char* name, T& field) {
  absl::StatusOr<std::optional<double>> v = JsonNumber(body, name);
  if (!v.ok()) return v.status();
  if (v->has_value()) field = static_cast<T>(**v);
  return absl::OkStatus();
}

// logit_bias: {"token id": bias, ...}. The count is bounded here, before anything is copied;
// the ids' vocabulary and the biases' range are the engine's checks (RenameEngineError).
absl::Status ParseLogitBias(const json& body, SamplingParams& s) {
  const json* bias = JsonMember(body, "logit_bias");
  if (bias == nullptr) return absl::OkStatus();
  if (!bias->is_object()) {
    return InvalidField("logit_bias", "must be an object mapping token ids (as strings) to biases");
  }
  if (bias->size() > static_cast<size_t>(kMaxLogitBias)) {
    return InvalidField("logit_bias", absl::StrCat(bias->size(), " entries exceed the limit of ",
                                                   kMaxLogitBias));
  }
  for (const auto& [key, value] : bias->items()) {
    int64_t token = -1;
    if (key.empty() || !std::all_of(key.begin(), key.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(key, &token) || token > std::numeric_limits<TokenId>::max()) {
      return InvalidField("logit_bias",
                          absl::StrCat("key \"", key.substr(0, 32), "\" is not a token id"));
    }
    // Checked as a double: a float cannot hold every JSON number.
    const double b = value.is_number() ? value.get<double>() : std::nan("");
    if (!(b >= -kMaxAbsLogitBias && b <= kMaxAbsLogitBias)) {
      return InvalidField("logit_bias", absl::StrCat("the bias of token ", token,
                                                     " must be a number in [-100, 100]"));
    }
    s.logit_bias.push_back({static_cast<TokenId>(token), static_cast<float>(b)});
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, SamplingParams& s) {
  for (const absl::Status& status :
       {SetNumber(body, "temperature", s.temperature), SetNumber(body, "top_p", s.top_p),
        SetNumber(body, "min_p", s.min_p),
        SetNumber(body, "repetition_penalty", s.repetition_penalty),
        SetNumber(body, "presence_penalty", s.presence_penalty),
        SetNumber(body, "frequency_penalty", s.frequency_penalty)}) {
    if (!status.ok()) return status;
  }
  // top_k: -1 means off in vLLM's dialect; 0 in the engine's.
  absl::StatusOr<std::optional<int32_t>> top_k =
      JsonBoundedInteger(body, "top_k", -1, std::numeric_limits<int32_t>::max(), "");
  if (!top_k.ok()) return top_k.status();
  if (top_k->has_value()) s.top_k = std::max(**top_k, 0);
  if (absl::Status status = ParseLogitBias(body, s); !status.ok()) return status;
  absl::StatusOr<std::optional<int64_t>> seed = JsonInteger(body, "seed");
  if (!seed.ok()) return seed.status();
  if (seed->has_value()) {
    s.seed = static_cast<uint64_t>(**seed);
  } else {
    absl::StatusOr<uint64_t> random = RandomSeed();
    if (!random.ok()) return random.status();
    s.seed = *random;
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const json& body, OpenAiEndpoint endpoint, const RequestLimits& limits,
                           OpenAiRequest& out) {
  const std::string limit = absl::StrCat(" (max_top_logprobs)");
  if (endpoint == OpenAiEndpoint::kCompletions) {
    // Completions: "logprobs": n reports each token's logprob and its n most likely
    // alternatives (0: the token's own only).
    absl::StatusOr<std::optional<int32_t>> n =
        JsonBoundedInteger(body, "logprobs", 0, limits.max_top_logprobs, limit);
    if (!n.ok()) return n.status();
    out.logprobs = n->has_value();
    out.top_logprobs = n->value_or(0);
  } else {
    absl::StatusOr<bool> logprobs = JsonBool(body, "logprobs");
    if (!logprobs.ok()) return logprobs.status();
    absl::StatusOr<std::optional<int32_t>> n =
        JsonBoundedInteger(body, "top_logprobs", 0, limits.max_top_logprobs, limit);
    if (!n.ok()) return n.status();
    if (n->has_value() && !*logprobs) {
      return InvalidField("top_logprobs", "requires \"logprobs\": true");
    }
    out.logprobs = *logprobs;
    out.top_logprobs = n->value_or(0);
  }
  out.generate.top_logprobs = out.logprobs ? std::max(out.top_logprobs, 1) : 0;
  // The echoed prompt's text comes from the engine with its tokens' logprobs, which are then
  // reported only when asked for.
  if (out.echo) out.generate.prompt_logprobs = out.top_logprobs;
  return absl::OkStatus();
}

// A whole (non-streamed) answer is built in memory: its logprob entries are bounded.
absl::Status CheckWholeAnswer(const OpenAiRequest& request) {
  if (request.stream || !request.logprobs) return absl::OkStatus();
  const int64_t tokens = int64_t{request.generate.max_new_tokens} +
                        (request.echo ? static_cast<int64_t>(request.generate.prompt.size()) : 0);
  const int64_t entries = tokens * (1 + int64_t{request.top_logprobs}) * request.generate.n;
  if (entries <= kMaxWholeAnswerLogprobs) return absl::OkStatus();
  const char* alternatives =
      request.endpoint == OpenAiEndpoint::kCompletions ? "logprobs" : "top_logprobs";
  const std::string counted =
      request.echo ? absl::StrCat("(", request.max_tokens_field, " + the echoed prompt's tokens)")
                   : request.max_tokens_field;
  const std::string count =
      request.echo ? absl::StrCat("(", request.generate.max_new_tokens, " + ",
                                  request.generate.prompt.size(), ")")
                   : absl::StrCat(request.generate.max_new_tokens);
  const std::string choices =
      request.generate.n > 1 ? absl::StrCat(" x ", request.generate.n) : "";
  return InvalidField(
      request.max_tokens_field,
      absl::StrCat("without \"stream\": true, ", counted, " x (1 + ", alternatives, ")",
                   request.generate.n > 1 ? " x n" : "", " = ", count, " x ",
                   1 + request.top_logprobs, choices, " = ", entries, " logprob entries exceed the limit of ", kMaxWholeAnswerLogprobs,
                   " for an answer sent whole; stream it, or ask for fewer tokens or "
                   "alternatives"));
}

// OpenAI fields this server does not implement and that would change the answer if ignored
// (docs/openai.md lists them): refused by name rather than silently dropped.
absl::Status RefuseUnsupported(const json& body) {
  if (const json* best_of = JsonMember(body, "best_of");
      best_of != nullptr && !(best_of->is_number_integer() && best_of->get<int64_t>() == 1)) {
    return InvalidField("best_of", "only 1 (this server does not rank candidates; use n)");
  }
  if (const json* suffix = JsonMember(body, "suffix"); suffix != nullptr) {
    return InvalidField("suffix", "not supported (no insertion: the model continues the prompt)");
  }
  for (const char* field : {"tools", "functions"}) {
    if (const json* tools = JsonMember(body, field);
        tools != nullptr && !(tools->is_array() && tools->empty())) {
      return InvalidField(field, "tool calling is not supported by this server");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                 const OpenAiContext& context,
                                                 std::string request_id) {
  if (FindJsonNestingDeeperThan(std::string_view(body.data(), body.size()), kMaxJsonDepth)
          .has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("body: JSON nested more than ", kMaxJsonDepth,
                                                   " levels deep exceeds the limit"));
  }
  const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        "body: not valid JSON (send a JSON object with Content-Type: application/json)");
  }
  if (!j.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  OpenAiRequest out;
  out.endpoint = endpoint;
  out.generate.request_id = std::move(request_id);

  const json* model = JsonMember(j, "model");
  if (model == nullptr || !model->is_string()) {
    return InvalidField("model", absl::StrCat("required: a string (this server serves \"",
                                              context.model_id, "\")"));
  }
  if (model->get_ref<const std::string&>() != context.model_id) {
    return absl::NotFoundError(
        absl::StrCat("model: the model \"", model->get_ref<const std::string&>(),
                     "\" does not exist; this server serves \"", context.model_id, "\""));
  }
  absl::StatusOr<std::optional<int32_t>> n =
      JsonBoundedInteger(j, "n", 1, context.limits.max_choices, " (max_choices)");
  if (!n.ok()) return n.status();
  out.generate.n = n->value_or(1);
  if (absl::Status s = RefuseUnsupported(j); !s.ok()) return s;
  // Extension: with a session_id and n > 1, the choice the session continues with.
  absl::StatusOr<std::optional<int32_t>> session_choice = JsonBoundedInteger(
      j, "session_choice", 0, std::max(out.generate.n - 1, 0), " (a choice index: below n)");
  if (!session_choice.ok()) return session_choice.status();
  out.generate.session_choice = *session_choice;
  if (const json* user = JsonMember(j, "user"); user != nullptr && !user->is_string()) {
    return InvalidField("user", "must be a string");
  }

  absl::StatusOr<bool> stream = JsonBool(j, "stream");
  if (!stream.ok()) return stream.status();
  out.stream = *stream;
  if (const json* options = JsonMember(j, "stream_options"); options != nullptr) {
    if (!out.stream) return InvalidField("stream_options", "only allowed when \"stream\" is true");
    if (!options->is_object()) return InvalidField("stream_options", "must be an object");
    absl::StatusOr<bool> usage = JsonBool(*options, "include_usage");
    if (!usage.ok()) return InvalidField("stream_options.include_usage", "must be true or false");
    out.include_usage = *usage;
  }

  absl::StatusOr<std::vector<TokenId>> prompt = endpoint == OpenAiEndpoint::kCompletions
                                                    ? CompletionPrompt(j, context)
                                                    : ChatPrompt(j, context);
  if (!prompt.ok()) return prompt.status();
  out.generate.prompt = *std::move(prompt);

  // max_completion_tokens supersedes max_tokens (OpenAI's chat API deprecates the latter).
  const char* budget_field =
      JsonMember(j, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  out.max_tokens_field = budget_field;
  // echo: the completion may be empty (max_tokens 0 scores the prompt: evaluation harnesses).
  absl::StatusOr<bool> echo = JsonBool(j, "echo");
  if (!echo.ok()) return echo.status();
  if (*echo && endpoint == OpenAiEndpoint::kChatCompletions) {
    return InvalidField("echo", "only /v1/completions echoes its prompt");
  }
  out.echo = *echo;
  if (out.echo && out.generate.n > 1) {
    return InvalidField("echo", "not with n > 1 (the echoed prompt and its logprobs are the same "
                                "for every choice: ask for them with n = 1)");
  }
  absl::StatusOr<std::optional<int32_t>> budget = JsonBoundedInteger(
      j, budget_field, out.echo ? 0 : 1, context.limits.max_new_tokens,
      out.echo || endpoint == OpenAiEndpoint::kChatCompletions
          ? " (max_new_tokens)"
          : " (max_new_tokens; 0 only with \"echo\": true)");
  if (!budget.ok()) return budget.status();
  out.generate.max_new_tokens =
      budget->value_or(std::min(kDefaultMaxNewTokens, context.limits.max_new_tokens));

  if (absl::Status s = ParseSampling(j, out.generate.sampling); !s.ok()) return s;
  if (absl::Status s = ParseStop(j, context.limits, out.generate); !s.ok()) return s;
  if (absl::Status s = ParseLogprobs(j, endpoint, context.limits, out); !s.ok()) return s;
  if (absl::Status s = CheckWholeAnswer(out); !s.ok()) return s;

  if (JsonMember(j, "return_token_ids") != nullptr) {
    absl::StatusOr<bool> return_token_ids = JsonBool(j, "return_token_ids");
    if (!return_token_ids.ok()) return return_token_ids.status();
    out.return_token_ids = *return_token_ids;
  } else {
    out.return_token_ids = !context.tokenizer->has_text();
  }

  absl::StatusOr<bool> ignore_eos = JsonBool(j, "ignore_eos");
  if (!ignore_eos.ok()) return ignore_eos.status();
  out.generate.ignore_eos = *ignore_eos;

  if (const json* session = JsonMember(j, "session_id"); session != nullptr) {
    if (!session->is_string()) return InvalidField("session_id", "must be a string");
    absl::StatusOr<SessionId> id =
        ParseSessionId(session->get_ref<const std::string&>(), "session_id");
    if (!id.ok()) return id.status();
    out.generate.session_id = *std::move(id);
  }
  if (absl::Status s = ParseOpenAiConstraint(j, context, out); !s.ok()) return s;
  return out;
}

absl::Status RenameEngineError(const absl::Status& status, const OpenAiRequest& request) {
  absl::string_view message = status.message();
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return status;
  absl::string_view field = message.substr(0, colon);
  std::string renamed;
  if (absl::ConsumePrefix(&field, "sampling.")) {
    renamed = std::string(field);
  } else if (field == "max_new_tokens") {
    renamed = request.max_tokens_field;
  } else if ((field == "top_logprobs" || field == "prompt_logprobs") &&
             request.endpoint == OpenAiEndpoint::kCompletions) {
    renamed = "logprobs";
  } else if (absl::ConsumePrefix(&field, "prompt")) {
    // "prompt.token_ids[3]" is the fourth id of the completions prompt.
    absl::ConsumePrefix(&field, ".token_ids");
    renamed = request.endpoint == OpenAiEndpoint::kChatCompletions ? "messages"
                                                                   : absl::StrCat("prompt", field);
  } else if ((field == "constraint" || absl::StartsWith(field, "constraint.")) &&
             !request.constraint_field.empty()) {
    renamed = request.constraint_field;
  } else {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(renamed, message.substr(colon)));
}

}  // namespace linserve
