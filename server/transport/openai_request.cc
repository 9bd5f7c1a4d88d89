#include "server/transport/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "model/format/json_parse.h"
#include "nlohmann/json.hpp"
#include "server/sessions/session_id.h"
#include "server/transport/random_seed.h"

namespace linserve {
namespace {

using nlohmann::json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// The member `name` of the request, nullptr when absent or null (OpenAI treats null as unset).
const json* Member(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> Number(const json& body, const char* name) {
  const json* v = Member(body, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return Invalid(name, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Invalid(name, "must be finite");
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> Integer(const json& body, const char* name) {
  const json* v = Member(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(name, "must be an integer in [-2^63, 2^63)");
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  return Invalid(name, "must be an integer");
}

// An integer in [lo, hi], naming `limit` in the error.
absl::StatusOr<std::optional<int32_t>> BoundedInteger(const json& body, const char* name,
                                                      int64_t lo, int64_t hi,
                                                      absl::string_view limit) {
  absl::StatusOr<std::optional<int64_t>> v = Integer(body, name);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return std::optional<int32_t>();
  if (**v < lo || **v > hi) {
    return Invalid(name, absl::StrCat("must be in [", lo, ", ", hi, "]", limit, ", got ", **v));
  }
  return std::optional<int32_t>(static_cast<int32_t>(**v));
}

absl::StatusOr<bool> Bool(const json& body, const char* name) {
  const json* v = Member(body, name);
  if (v == nullptr) return false;
  if (!v->is_boolean()) return Invalid(name, "must be true or false");
  return v->get<bool>();
}

// The text of a chat message's content: a string, or an array of {"type": "text", "text"}
// parts (concatenated).
absl::StatusOr<std::string> MessageContent(const json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Invalid(field, "must be a string or an array of {\"type\": \"text\"} parts");
  }
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_field = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return Invalid(part_field, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
      return Invalid(absl::StrCat(part_field, ".type"),
                     "only \"text\" parts are supported by this model");
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return Invalid(absl::StrCat(part_field, ".text"), "required: a string");
    }
    out += text->get<std::string>();
  }
  return out;
}

absl::StatusOr<std::vector<TokenId>> ChatPrompt(const json& body, const OpenAiContext& context) {
  if (context.chat_template == nullptr) {
    return Invalid("messages",
                   absl::StrCat("the model \"", context.model_id, "\" has no chat template (",
                                kChatTemplateFile, " in its directory): use /v1/completions"));
  }
  const json* messages = Member(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return Invalid("messages", "required: a non-empty array of messages");
  }
  std::vector<ChatMessage> parsed;
  int64_t bytes = 0;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(field, "must be an object");
    ChatMessage message;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Invalid(absl::StrCat(field, ".role"), "required: a string");
    }
    message.role = role->get<std::string>();
    if (!context.chat_template->HasRole(message.role)) {
      return Invalid(absl::StrCat(field, ".role"),
                     absl::StrCat("\"", message.role,
                                  "\" is not a role of this model's chat "
                                  "template"));
    }
    if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
      if (!name->is_string()) return Invalid(absl::StrCat(field, ".name"), "must be a string");
      message.name = name->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return Invalid(absl::StrCat(field, ".content"), "required");
    }
    absl::StatusOr<std::string> text = MessageContent(*content, absl::StrCat(field, ".content"));
    if (!text.ok()) return text.status();
    message.content = *std::move(text);
    bytes += static_cast<int64_t>(message.content.size() +
                                  (message.name.has_value() ? message.name->size() : 0));
    if (bytes > context.limits.max_prompt_bytes) {
      return Invalid("messages", absl::StrCat("more than ", context.limits.max_prompt_bytes,
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
    return Invalid(field, absl::StrCat(ids.size(), " token ids exceed the limit of ",
                                       limits.max_prompt_tokens, " (max_prompt_tokens)"));
  }
  std::vector<TokenId> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 ||
        ids[i].get<int64_t>() > std::numeric_limits<TokenId>::max()) {
      return Invalid(absl::StrCat(field, "[", i, "]"), "must be a token id (an integer >= 0)");
    }
    out.push_back(static_cast<TokenId>(ids[i].get<int64_t>()));
  }
  return out;
}

// A completion prompt: a string, an array of token ids, or an array holding one of those
// (several prompts would be several choices, which this server does not serve).
absl::StatusOr<std::vector<TokenId>> CompletionPrompt(const json& body,
                                                      const OpenAiContext& context) {
  const json* prompt = Member(body, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "required");
  const json* one = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    if (prompt->size() != 1) {
      return Invalid("prompt", absl::StrCat("holds ", prompt->size(),
                                            " prompts; this server completes one per request"));
    }
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    if (one->get_ref<const std::string&>().empty()) return Invalid("prompt", "must not be empty");
    return TokenizeText(one->get_ref<const std::string&>(), "prompt", *context.tokenizer,
                        context.limits);
  }
  if (one->is_array()) {
    if (one->empty()) return Invalid("prompt", "must not be empty");
    return TokenIds(*one, "prompt", context.limits);
  }
  return Invalid("prompt", "must be a string, an array of token ids, or an array of one of them");
}

absl::Status ParseStop(const json& body, const RequestLimits& limits, GenerateRequest& out) {
  const json* stop = Member(body, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    out.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (stop->size() > static_cast<size_t>(limits.max_stop_strings)) {
      return Invalid("stop", absl::StrCat(stop->size(), " stop strings exceed the limit of ",
                                          limits.max_stop_strings, " (max_stop_strings)"));
    }
    for (size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) {
        return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
      }
      out.stop.push_back((*stop)[i].get<std::string>());
    }
  } else {
    return Invalid("stop", "must be a string or an array of strings");
  }
  return absl::OkStatus();
}

// Sets `field` of `out` from the number `name` when present.
template <typename T>
absl::Status SetNumber(const json& body, const char* name, T& field) {
  absl::StatusOr<std::optional<double>> v = Number(body, name);
  if (!v.ok()) return v.status();
  if (v->has_value()) field = static_cast<T>(**v);
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
      BoundedInteger(body, "top_k", -1, std::numeric_limits<int32_t>::max(), "");
  if (!top_k.ok()) return top_k.status();
  if (top_k->has_value()) s.top_k = std::max(**top_k, 0);
  absl::StatusOr<std::optional<int64_t>> seed = Integer(body, "seed");
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
        BoundedInteger(body, "logprobs", 0, limits.max_top_logprobs, limit);
    if (!n.ok()) return n.status();
    out.logprobs = n->has_value();
    out.top_logprobs = n->value_or(0);
  } else {
    absl::StatusOr<bool> logprobs = Bool(body, "logprobs");
    if (!logprobs.ok()) return logprobs.status();
    absl::StatusOr<std::optional<int32_t>> n =
        BoundedInteger(body, "top_logprobs", 0, limits.max_top_logprobs, limit);
    if (!n.ok()) return n.status();
    if (n->has_value() && !*logprobs) {
      return Invalid("top_logprobs", "requires \"logprobs\": true");
    }
    out.logprobs = *logprobs;
    out.top_logprobs = n->value_or(0);
  }
  out.generate.top_logprobs = out.logprobs ? std::max(out.top_logprobs, 1) : 0;
  return absl::OkStatus();
}

// A whole (non-streamed) answer is built in memory: its logprob entries are bounded.
absl::Status CheckWholeAnswer(const OpenAiRequest& request) {
  if (request.stream || !request.logprobs) return absl::OkStatus();
  const int64_t entries =
      int64_t{request.generate.max_new_tokens} * (1 + int64_t{request.top_logprobs});
  if (entries <= kMaxWholeAnswerLogprobs) return absl::OkStatus();
  const char* alternatives =
      request.endpoint == OpenAiEndpoint::kCompletions ? "logprobs" : "top_logprobs";
  return Invalid(
      request.max_tokens_field,
      absl::StrCat("without \"stream\": true, ", request.max_tokens_field, " x (1 + ", alternatives,
                   ") = ", request.generate.max_new_tokens, " x ", 1 + request.top_logprobs, " = ",
                   entries, " logprob entries exceed the limit of ", kMaxWholeAnswerLogprobs,
                   " for an answer sent whole; stream it, or ask for fewer tokens or "
                   "alternatives"));
}

// A constraint as the request carried it.
struct RequestedConstraint {
  ConstraintSpec spec;
  // The request's field (response_format or a guided_* field), for errors about the request.
  std::string field;
  // The field holding the constraint's text, for the compiler's errors.
  std::string text_field;
};

std::optional<RequestedConstraint> Requested(ConstraintKind kind, std::string text,
                                             std::string field, std::string text_field) {
  std::optional<RequestedConstraint> out(std::in_place);
  out->spec.kind = kind;
  out->spec.text = std::move(text);
  out->field = std::move(field);
  out->text_field = std::move(text_field);
  return out;
}

// OpenAI's response_format: {"type": "text"} (no constraint), {"type": "json_object"}, or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}.
absl::StatusOr<std::optional<RequestedConstraint>> ResponseFormat(const json& body) {
  const json* format = Member(body, "response_format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return Invalid("response_format", "must be an object with a \"type\"");
  const json* type = Member(*format, "type");
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format.type",
                   "required: \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string& kind = type->get_ref<const std::string&>();
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    return Requested(ConstraintKind::kJsonObject, "", "response_format", "response_format");
  }
  if (kind != "json_schema") {
    return Invalid("response_format.type",
                   absl::StrCat("\"", kind,
                                "\" is not one of \"text\", \"json_object\", \"json_schema\""));
  }
  const json* spec = Member(*format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return Invalid("response_format.json_schema",
                   "required with \"type\": \"json_schema\": an object with \"name\" and "
                   "\"schema\"");
  }
  // OpenAI's rule for the name: 1 to 64 of a-z, A-Z, 0-9, _ and -.
  const json* name = Member(*spec, "name");
  if (name == nullptr || !name->is_string()) {
    return Invalid("response_format.json_schema.name", "required: a string");
  }
  const std::string& n = name->get_ref<const std::string&>();
  if (n.empty() || n.size() > 64 || !std::all_of(n.begin(), n.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '-';
      })) {
    return Invalid("response_format.json_schema.name",
                   "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  }
  if (const json* d = Member(*spec, "description"); d != nullptr && !d->is_string()) {
    return Invalid("response_format.json_schema.description", "must be a string");
  }
  // Strict or not, the output follows the schema exactly: a keyword the server cannot enforce
  // is refused either way.
  if (const json* strict = Member(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return Invalid("response_format.json_schema.strict", "must be true or false");
  }
  const json* schema = Member(*spec, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return Invalid("response_format.json_schema.schema", "required: a JSON schema (an object)");
  }
  return Requested(ConstraintKind::kJsonSchema, schema->dump(), "response_format",
                   "response_format.json_schema.schema");
}

// vLLM's guided_json (a schema, or a string holding one), guided_regex and guided_grammar.
absl::StatusOr<std::optional<RequestedConstraint>> Guided(const json& body, const char* name,
                                                         ConstraintKind kind) {
  const json* v = Member(body, name);
  if (v == nullptr) return std::nullopt;
  std::string text;
  if (v->is_string()) {
    text = v->get<std::string>();
  } else if (kind == ConstraintKind::kJsonSchema && v->is_object()) {
    text = v->dump();
  } else {
    return Invalid(name, kind == ConstraintKind::kJsonSchema
                             ? "must be a JSON schema: an object, or a string holding one"
                             : "must be a string");
  }
  return Requested(kind, std::move(text), name, name);
}

// At most one of response_format (but "text"), guided_json, guided_regex and guided_grammar,
// compiled through context.constraints.
absl::Status ParseConstraint(const json& body, const OpenAiContext& context, OpenAiRequest& out) {
  if (Member(body, "guided_choice") != nullptr) {
    return Invalid("guided_choice",
                   "not supported: use guided_regex with the choices as alternatives, e.g. "
                   "\"(yes|no)\"");
  }
  std::optional<RequestedConstraint> chosen;
  auto take = [&](absl::StatusOr<std::optional<RequestedConstraint>> requested) {
    if (!requested.ok()) return requested.status();
    if (!requested->has_value()) return absl::OkStatus();
    if (chosen.has_value()) {
      return Invalid((*requested)->field,
                     absl::StrCat("cannot be combined with ", chosen->field,
                                  ": a request takes at most one of response_format, "
                                  "guided_json, guided_regex and guided_grammar"));
    }
    chosen = **std::move(requested);
    return absl::OkStatus();
  };
  if (absl::Status s = take(ResponseFormat(body)); !s.ok()) return s;
  if (absl::Status s = take(Guided(body, "guided_json", ConstraintKind::kJsonSchema)); !s.ok()) {
    return s;
  }
  if (absl::Status s = take(Guided(body, "guided_regex", ConstraintKind::kRegex)); !s.ok()) {
    return s;
  }
  if (absl::Status s = take(Guided(body, "guided_grammar", ConstraintKind::kGrammar)); !s.ok()) {
    return s;
  }
  if (!chosen.has_value()) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      context.constraints->Get(chosen->spec, chosen->text_field);
  if (!compiled.ok()) return compiled.status();
  out.generate.constraint = *std::move(compiled);
  out.constraint_field = std::move(chosen->field);
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

  const json* model = Member(j, "model");
  if (model == nullptr || !model->is_string()) {
    return Invalid("model", absl::StrCat("required: a string (this server serves \"",
                                         context.model_id, "\")"));
  }
  if (model->get_ref<const std::string&>() != context.model_id) {
    return absl::NotFoundError(
        absl::StrCat("model: the model \"", model->get_ref<const std::string&>(),
                     "\" does not exist; this server serves \"", context.model_id, "\""));
  }
  absl::StatusOr<std::optional<int32_t>> n =
      BoundedInteger(j, "n", 1, 1, " (this server generates one choice per request)");
  if (!n.ok()) return n.status();
  if (const json* user = Member(j, "user"); user != nullptr && !user->is_string()) {
    return Invalid("user", "must be a string");
  }

  absl::StatusOr<bool> stream = Bool(j, "stream");
  if (!stream.ok()) return stream.status();
  out.stream = *stream;
  if (const json* options = Member(j, "stream_options"); options != nullptr) {
    if (!out.stream) return Invalid("stream_options", "only allowed when \"stream\" is true");
    if (!options->is_object()) return Invalid("stream_options", "must be an object");
    absl::StatusOr<bool> usage = Bool(*options, "include_usage");
    if (!usage.ok()) return Invalid("stream_options.include_usage", "must be true or false");
    out.include_usage = *usage;
  }

  absl::StatusOr<std::vector<TokenId>> prompt = endpoint == OpenAiEndpoint::kCompletions
                                                    ? CompletionPrompt(j, context)
                                                    : ChatPrompt(j, context);
  if (!prompt.ok()) return prompt.status();
  out.generate.prompt = *std::move(prompt);

  // max_completion_tokens supersedes max_tokens (OpenAI's chat API deprecates the latter).
  const char* budget_field =
      Member(j, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  out.max_tokens_field = budget_field;
  absl::StatusOr<std::optional<int32_t>> budget =
      BoundedInteger(j, budget_field, 1, context.limits.max_new_tokens, " (max_new_tokens)");
  if (!budget.ok()) return budget.status();
  out.generate.max_new_tokens =
      budget->value_or(std::min(kDefaultMaxNewTokens, context.limits.max_new_tokens));

  if (absl::Status s = ParseSampling(j, out.generate.sampling); !s.ok()) return s;
  if (absl::Status s = ParseStop(j, context.limits, out.generate); !s.ok()) return s;
  if (absl::Status s = ParseLogprobs(j, endpoint, context.limits, out); !s.ok()) return s;
  if (absl::Status s = CheckWholeAnswer(out); !s.ok()) return s;

  absl::StatusOr<bool> ignore_eos = Bool(j, "ignore_eos");
  if (!ignore_eos.ok()) return ignore_eos.status();
  out.generate.ignore_eos = *ignore_eos;

  if (const json* session = Member(j, "session_id"); session != nullptr) {
    if (!session->is_string()) return Invalid("session_id", "must be a string");
    absl::StatusOr<SessionId> id =
        ParseSessionId(session->get_ref<const std::string&>(), "session_id");
    if (!id.ok()) return id.status();
    out.generate.session_id = *std::move(id);
  }
  if (absl::Status s = ParseConstraint(j, context, out); !s.ok()) return s;
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
  } else if (absl::ConsumePrefix(&field, "prompt")) {
    // "prompt.token_ids[3]" is the fourth id of the completions prompt.
    absl::ConsumePrefix(&field, ".token_ids");
    renamed = request.endpoint == OpenAiEndpoint::kChatCompletions ? "messages"
                                                                   : absl::StrCat("prompt", field);
  } else if (field == "top_logprobs" && request.endpoint == OpenAiEndpoint::kCompletions) {
    renamed = "logprobs";
  } else if ((field == "constraint" || absl::StartsWith(field, "constraint.")) &&
             !request.constraint_field.empty()) {
    renamed = request.constraint_field;
  } else {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(renamed, message.substr(colon)));
}

ApiError ToApiError(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kAborted:
      e.http_status = 409;
      e.type = "conflict_error";
      e.code = "session_busy";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  // The first word of an invalid request's message names the field ("stop[1]: ...").
  if (e.http_status == 400 || e.http_status == 404) {
    const size_t colon = e.message.find(": ");
    if (colon != std::string::npos) {
      const absl::string_view field = absl::string_view(e.message).substr(0, colon);
      const bool is_field = std::all_of(field.begin(), field.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
      });
      if (is_field) e.param = std::string(field);
    }
  }
  if (e.http_status == 404 && e.param == "model") e.code = "model_not_found";
  return e;
}

std::string ApiErrorJson(const ApiError& error) {
  json e = {
      {"message", error.message}, {"type", error.type}, {"param", nullptr}, {"code", nullptr}};
  if (error.param.has_value()) e["param"] = *error.param;
  if (error.code.has_value()) e["code"] = *error.code;
  return json{{"error", std::move(e)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace linserve
