// OpenAiResponse: the body of one OpenAI completion or chat completion, streamed as server-sent
// events (one "data: {chunk}" per batch of tokens, the usage chunk when asked for, then
// "data: [DONE]") or whole. Holds what a response needs across tokens (the text so far, the
// logprobs, the text offset). Not thread-safe: one per request, used by one thread at a time.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_RESPONSE_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/engine/token_sink.h"
#include "server/transport/openai_request.h"

namespace linserve {

// A token as the engine handed it over, with the text that became final with it.
struct EmittedToken {
  GeneratedToken token;
  std::string text;
  // An echoed prompt token with no logprob (nothing before it was fed by the request): its
  // token_logprobs and top_logprobs entries are null.
  bool no_logprob = false;
  // A token of the echoed prompt (completions' echo), not a generated one: not in token_ids.
  bool echoed = false;
};

// What a request of n choices used: the prompt once, the choices' tokens summed, the session's
// tokens after the choice it continues with.
struct ChoicesUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int64_t session_tokens = 0;
};

class OpenAiResponse {
 public:
  // `request`'s fields that shape the response are copied (its n choices among them);
  // `tokenizer` must outlive this.
  OpenAiResponse(const OpenAiRequest& request, std::string id, int64_t created,
                 std::string model_id, const Tokenizer& tokenizer);

  int32_t choices() const { return static_cast<int32_t>(choices_.size()); }
  // Records that `choice` ended with `result` (OK); says whether every choice has.
  bool EndChoice(int32_t choice, const GenerationResult& result);

  // Streaming: the events for `tokens` of `choice` ("" when they carry neither text, logprobs
  // nor token ids).
  std::string StreamTokens(int32_t choice, absl::Span<const EmittedToken> tokens);
  // Streaming: `choice`'s last chunk (its finish_reason; EndChoice first).
  std::string StreamChoiceEnd(int32_t choice);
  // Streaming, once every choice ended: the usage chunk when asked for, and [DONE].
  std::string StreamEnd() const;
  // Streaming: an error after the stream began, as OpenAI sends one ("data: {"error": ...}").
  static std::string StreamError(const absl::Status& status);

  // Whole: adds `tokens` of `choice` to the response.
  void Append(int32_t choice, absl::Span<const EmittedToken> tokens);
  // Whole, once every choice ended: the response JSON.
  std::string Finish() const;

 private:
  struct Choice {
    // A text chunk's event around its JSON-escaped text.
    std::string text_event_prefix;
    std::string text_event_suffix;
    bool sent_role = false;
    bool sent_prompt_ids = false;  // streamed completions: prompt_token_ids went out
    int64_t text_offset = 0;
    std::string text;  // whole responses: the text so far
    nlohmann::json logprobs;
    std::vector<TokenId> token_ids;  // whole responses with return_token_ids: generated so far
    std::optional<GenerationResult> result;  // once it ended
  };
  nlohmann::json Chunk(nlohmann::json choice) const;
  // The common case of a streamed chunk, written without building a JSON tree: text only, no
  // logprobs, not the first chat chunk.
  std::string TextEvent(const Choice& choice, std::string_view text) const;
  ChoicesUsage SumUsage() const;
  nlohmann::json Usage() const;
  // Adds each token's logprob entry to `logprobs` (the completions or the chat shape).
  void AddLogprobs(Choice& choice, absl::Span<const EmittedToken> tokens,
                   nlohmann::json& logprobs);
  nlohmann::json EmptyLogprobs() const;
  // How a logprobs entry names token `id`: its bytes, or "token_id:<id>" when the model has no
  // tokenizer (vLLM's spelling for tokens shown as ids).
  std::string TokenName(TokenId id) const;
  // With return_token_ids: adds token_ids (the generated ones of `tokens`) to a streamed chunk of
  // `choice`, and prompt_token_ids when they were not sent yet.
  void AddTokenIds(Choice& choice, absl::Span<const EmittedToken> tokens, nlohmann::json& chunk);

  const OpenAiEndpoint endpoint_;
  const bool include_usage_;
  const bool logprobs_;
  const int32_t top_logprobs_;
  const bool return_token_ids_;
  const std::vector<TokenId> prompt_token_ids_;  // with return_token_ids only
  bool sent_prompt_ids_ = false;                 // streamed chat: prompt_token_ids went out
  const std::optional<std::string> session_id_;
  const int32_t session_choice_;  // whose session_tokens the usage reports
  const std::string id_;
  const int64_t created_;
  const std::string model_id_;
  const Tokenizer& tokenizer_;
  std::vector<Choice> choices_;
  int32_t ended_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_RESPONSE_H_
