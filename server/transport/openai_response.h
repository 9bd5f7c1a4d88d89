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
};

class OpenAiResponse {
 public:
  // `request`'s fields that shape the response are copied; `tokenizer` must outlive this.
  OpenAiResponse(const OpenAiRequest& request, std::string id, int64_t created,
                 std::string model_id, const Tokenizer& tokenizer);

  // Streaming: the events for `tokens` ("" when they carry neither text nor logprobs).
  std::string StreamTokens(absl::Span<const EmittedToken> tokens);
  // Streaming: the last chunk (finish_reason), the usage chunk when asked for, and [DONE].
  std::string StreamFinish(const GenerationResult& result);
  // Streaming: an error after the stream began, as OpenAI sends one ("data: {"error": ...}").
  static std::string StreamError(const absl::Status& status);

  // Whole: adds `tokens` to the response.
  void Append(absl::Span<const EmittedToken> tokens);
  // Whole: the response JSON.
  std::string Finish(const GenerationResult& result);

 private:
  nlohmann::json Chunk(nlohmann::json choice) const;
  // The common case of a streamed chunk, written without building a JSON tree: text only, no
  // logprobs, not the first chat chunk.
  std::string TextEvent(std::string_view text) const;
  nlohmann::json Usage(const GenerationResult& result) const;
  // Adds each token's logprob entry to `logprobs` (the completions or the chat shape).
  void AddLogprobs(absl::Span<const EmittedToken> tokens, nlohmann::json& logprobs);
  nlohmann::json EmptyLogprobs() const;

  const OpenAiEndpoint endpoint_;
  const bool include_usage_;
  const bool logprobs_;
  const int32_t top_logprobs_;
  const std::optional<std::string> session_id_;
  const std::string id_;
  const int64_t created_;
  const std::string model_id_;
  const Tokenizer& tokenizer_;

  // A text chunk's event around its JSON-escaped text.
  std::string text_event_prefix_;
  std::string text_event_suffix_;
  bool sent_role_ = false;
  int64_t text_offset_ = 0;
  std::string text_;
  nlohmann::json logprobs_json_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_RESPONSE_H_
