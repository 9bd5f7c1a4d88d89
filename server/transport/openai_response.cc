#include "server/transport/openai_response.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/transport/openai_error.h"

namespace linserve {
namespace {

using nlohmann::json;

std::string Dump(const json& j) {
  // Token bytes may be part of a UTF-8 character: replaced, never thrown on.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Event(const json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

// The engine's name (ToString), but for an end-of-sequence token and a completed constrained
// document (response_format): OpenAI counts both as a stop.
std::string_view FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kEos || reason == FinishReason::kConstraintComplete
             ? "stop"
             : ToString(reason);
}

// `text` as a JSON string literal, quotes included. `text` is valid UTF-8 (the detokenizer
// emits whole characters only, and replaces what is not one).
void AppendJsonString(std::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

OpenAiResponse::OpenAiResponse(const OpenAiRequest& request, std::string id, int64_t created,
                               std::string model_id, const Tokenizer& tokenizer)
    : endpoint_(request.endpoint),
      include_usage_(request.include_usage),
      logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      return_token_ids_(request.return_token_ids),
      prompt_token_ids_(request.return_token_ids ? request.generate.prompt
                                                 : std::vector<TokenId>()),
      session_id_(request.generate.session_id.has_value()
                      ? std::optional<std::string>(request.generate.session_id->value)
                      : std::nullopt),
      session_choice_(request.generate.session_choice.value_or(0)),
      id_(std::move(id)),
      created_(created),
      model_id_(std::move(model_id)),
      tokenizer_(tokenizer),
      choices_(static_cast<size_t>(std::max(request.generate.n, 1))) {
  for (size_t index = 0; index < choices_.size(); ++index) {
    Choice& c = choices_[index];
    c.logprobs = EmptyLogprobs();
    // A chunk with a placeholder text, split around it (the placeholder needs no escaping, so
    // it appears verbatim, and nothing else in a chunk can match it).
    const std::string placeholder = "@@text@@";
    json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      choice["delta"] = {{"content", placeholder}};
    } else {
      choice["text"] = placeholder;
    }
    const std::string whole = Event(Chunk(std::move(choice)));
    const size_t at = whole.find(absl::StrCat("\"", placeholder, "\""));
    c.text_event_prefix = whole.substr(0, at);
    c.text_event_suffix = whole.substr(at + placeholder.size() + 2);
  }
}

bool OpenAiResponse::EndChoice(int32_t choice, const GenerationResult& result) {
  Choice& c = choices_[static_cast<size_t>(choice)];
  if (!c.result.has_value()) ++ended_;
  c.result = result;
  return ended_ == choices();
}

std::string OpenAiResponse::TextEvent(const Choice& choice, std::string_view text) const {
  std::string out;
  out.reserve(choice.text_event_prefix.size() + text.size() + 8 +
              choice.text_event_suffix.size());
  out += choice.text_event_prefix;
  AppendJsonString(text, out);
  out += choice.text_event_suffix;
  return out;
}

json OpenAiResponse::EmptyLogprobs() const {
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) return json{{"content", json::array()}};
  return json{{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
}

std::string OpenAiResponse::TokenName(TokenId id) const {
  return tokenizer_.has_text() ? tokenizer_.TokenBytes(id) : absl::StrCat("token_id:", id);
}

void OpenAiResponse::AddTokenIds(Choice& choice, absl::Span<const EmittedToken> tokens,
                                 json& chunk) {
  json ids = json::array();
  for (const EmittedToken& t : tokens) {
    if (!t.echoed) ids.push_back(t.token.id);
  }
  json& first = chunk["choices"][0];
  first["token_ids"] = std::move(ids);
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    if (!std::exchange(sent_prompt_ids_, true)) chunk["prompt_token_ids"] = prompt_token_ids_;
  } else if (!std::exchange(choice.sent_prompt_ids, true)) {
    first["prompt_token_ids"] = prompt_token_ids_;
  }
}

void OpenAiResponse::AddLogprobs(Choice& choice, absl::Span<const EmittedToken> tokens,
                                 json& logprobs) {
  for (const EmittedToken& t : tokens) {
    const std::string piece = TokenName(t.token.id);
    const size_t alternatives =
        std::min<size_t>(t.token.top_logprobs.size(), static_cast<size_t>(top_logprobs_));
    if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
      json top = json::array();
      for (size_t i = 0; i < alternatives; ++i) {
        const std::string alt = TokenName(t.token.top_logprobs[i].token);
        top.push_back(
            {{"token", alt}, {"logprob", t.token.top_logprobs[i].logprob}, {"bytes", Bytes(alt)}});
      }
      logprobs["content"].push_back({{"token", piece},
                                     {"logprob", t.token.logprob},
                                     {"bytes", Bytes(piece)},
                                     {"top_logprobs", std::move(top)}});
    } else {
      json top = json::object();
      for (size_t i = 0; i < alternatives; ++i) {
        top[TokenName(t.token.top_logprobs[i].token)] = t.token.top_logprobs[i].logprob;
      }
      logprobs["tokens"].push_back(piece);
      logprobs["token_logprobs"].push_back(t.no_logprob ? json(nullptr) : json(t.token.logprob));
      logprobs["top_logprobs"].push_back(t.no_logprob ? json(nullptr) : std::move(top));
      logprobs["text_offset"].push_back(choice.text_offset);
    }
    choice.text_offset += static_cast<int64_t>(t.text.size());
  }
}

json OpenAiResponse::Chunk(json choice) const {
  json chunk = {{"id", id_},
                {"object", endpoint_ == OpenAiEndpoint::kChatCompletions ? "chat.completion.chunk"
                                                                         : "text_completion"},
                {"created", created_},
                {"model", model_id_},
                {"choices", json::array({std::move(choice)})}};
  if (include_usage_) chunk["usage"] = nullptr;
  return chunk;
}

ChoicesUsage OpenAiResponse::SumUsage() const {
  ChoicesUsage sum;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].result.has_value()) continue;
    const linserve::Usage& usage = choices_[i].result->usage;
    sum.prompt_tokens = usage.prompt_tokens;  // every choice fed the same prompt
    sum.completion_tokens += usage.generated_tokens;
    if (static_cast<int32_t>(i) == session_choice_) sum.session_tokens = usage.session_tokens;
  }
  return sum;
}

json OpenAiResponse::Usage() const {
  const ChoicesUsage sum = SumUsage();
  json usage = {{"prompt_tokens", sum.prompt_tokens},
                {"completion_tokens", sum.completion_tokens},
                {"total_tokens", sum.prompt_tokens + sum.completion_tokens}};
  if (session_id_.has_value()) usage["session_tokens"] = sum.session_tokens;
  return usage;
}

std::string OpenAiResponse::StreamTokens(int32_t index, absl::Span<const EmittedToken> tokens) {
  Choice& c = choices_[static_cast<size_t>(index)];
  std::string text;
  for (const EmittedToken& t : tokens) text += t.text;
  if (text.empty() && !logprobs_ && !return_token_ids_) return "";
  if (!logprobs_ && !return_token_ids_ &&
      (c.sent_role || endpoint_ == OpenAiEndpoint::kCompletions)) {
    c.text_offset += static_cast<int64_t>(text.size());
    return TextEvent(c, text);
  }
  json logprobs = nullptr;
  if (logprobs_) {
    logprobs = EmptyLogprobs();
    AddLogprobs(c, tokens, logprobs);
  } else {
    for (const EmittedToken& t : tokens) c.text_offset += static_cast<int64_t>(t.text.size());
  }
  json choice;
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    json delta = {{"content", std::move(text)}};
    if (!c.sent_role) delta["role"] = "assistant";
    c.sent_role = true;
    choice = {{"index", index},
              {"delta", std::move(delta)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", nullptr}};
  } else {
    choice = {{"index", index},
              {"text", std::move(text)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", nullptr}};
  }
  json chunk = Chunk(std::move(choice));
  if (return_token_ids_) AddTokenIds(c, tokens, chunk);
  return Event(chunk);
}

std::string OpenAiResponse::StreamChoiceEnd(int32_t index) {
  Choice& c = choices_[static_cast<size_t>(index)];
  const GenerationResult& result = *c.result;
  json choice;
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    json delta = json::object();
    if (!result.text.empty()) delta["content"] = result.text;
    if (!c.sent_role) delta["role"] = "assistant";
    c.sent_role = true;
    choice = {{"index", index},
              {"delta", std::move(delta)},
              {"logprobs", nullptr},
              {"finish_reason", FinishReasonName(result.reason)}};
  } else {
    choice = {{"index", index},
              {"text", result.text},
              {"logprobs", nullptr},
              {"finish_reason", FinishReasonName(result.reason)}};
  }
  json chunk = Chunk(std::move(choice));
  if (return_token_ids_) AddTokenIds(c, {}, chunk);
  return Event(chunk);
}

std::string OpenAiResponse::StreamEnd() const {
  std::string out;
  if (include_usage_) {
    json usage_chunk = Chunk(nullptr);
    usage_chunk["choices"] = json::array();
    usage_chunk["usage"] = Usage();
    out += Event(usage_chunk);
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string OpenAiResponse::StreamError(const absl::Status& status) {
  return absl::StrCat("data: ", ApiErrorJson(ToApiError(status)), "\n\n");
}

void OpenAiResponse::Append(int32_t index, absl::Span<const EmittedToken> tokens) {
  Choice& c = choices_[static_cast<size_t>(index)];
  if (logprobs_) AddLogprobs(c, tokens, c.logprobs);
  for (const EmittedToken& t : tokens) {
    c.text += t.text;
    if (return_token_ids_ && !t.echoed) c.token_ids.push_back(t.token.id);
  }
}

std::string OpenAiResponse::Finish() const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  json choices = json::array();
  for (size_t index = 0; index < choices_.size(); ++index) {
    const Choice& c = choices_[index];
    const std::string text = c.text + c.result->text;
    json choice = {{"index", index},
                   {"logprobs", logprobs_ ? c.logprobs : json(nullptr)},
                   {"finish_reason", FinishReasonName(c.result->reason)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      choice["text"] = text;
    }
    if (return_token_ids_) {
      choice["token_ids"] = c.token_ids;
      if (!chat) choice["prompt_token_ids"] = prompt_token_ids_;
    }
    choices.push_back(std::move(choice));
  }
  json response = {{"id", id_},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", created_},
                   {"model", model_id_},
                   {"choices", std::move(choices)},
                   {"usage", Usage()}};
  if (return_token_ids_ && chat) response["prompt_token_ids"] = prompt_token_ids_;
  if (session_id_.has_value()) response["session_id"] = *session_id_;
  return Dump(response);
}

}  // namespace linserve
