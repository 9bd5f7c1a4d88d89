// TokenSink: where the engine delivers one request's output. The transport implements it over a
// gRPC stream; tests implement it over a vector.
#ifndef LINSERVE_SERVER_ENGINE_TOKEN_SINK_H_
#define LINSERVE_SERVER_ENGINE_TOKEN_SINK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "model/backend/sampler.h"
#include "model/types.h"

namespace linserve {

enum class FinishReason {
  kLength,     // max_new_tokens reached
  kStop,       // a stop string matched or a stop token id was sampled
  kEos,        // the model's EOS token was sampled
  kCancelled,  // the server cancelled the request (shutdown past the drain deadline)
  kError,      // the request failed: OnFinish's status (never OK with it) says why
  kConstraintComplete,  // the constrained document is whole: EOS where it may end, or nothing
                        // may follow
};

std::string_view ToString(FinishReason reason);

struct GeneratedToken {
  TokenId id = 0;
  // Only when the request asked for top_logprobs > 0: log p(id) and the top alternatives, of the
  // temperature-free distribution.
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
};

// One token of the request's prompt with its log-probability (GenerateRequest::prompt_logprobs).
struct PromptToken {
  TokenId id = 0;
  // log p(id | every token the session's state consumed before it), of the temperature-free
  // distribution; nullopt for a first prompt token with nothing fed before it by this request:
  // the state already held everything before it (no logits are kept between requests). That is
  // an empty session of a model without BOS, or a later request whose session has no pending
  // token (the previous request's last generated token, when its state has not consumed it,
  // is fed first and scores the prompt's first token).
  std::optional<float> logprob;
  // The prompt_logprobs most likely tokens at its position (empty with logprob).
  std::vector<TokenLogprob> top_logprobs;
  // The prompt's text that became final with it (whole UTF-8 characters; the last token's
  // includes whatever was held back).
  std::string text;
};

struct Usage {
  // Tokens fed for this request's prompt, including a prepended BOS.
  int32_t prompt_tokens = 0;
  // Of prompt_tokens, those the model did not re-read: a cached prefix state covered them
  // (prefix_store.h).
  int32_t cached_prompt_tokens = 0;
  int32_t generated_tokens = 0;
  // From Engine::Submit to the first sampled token; zero when none was sampled.
  absl::Duration time_to_first_token;
  // From Engine::Submit to the end of the request.
  absl::Duration total_time;
  uint64_t seed = 0;
  // Tokens in the session after the request, across all its requests.
  int64_t session_tokens = 0;
};

struct GenerationResult {
  FinishReason reason = FinishReason::kLength;
  // Text that became final at the end: whatever the detokenizer and the stop-string matcher
  // still held back (never the stop string itself).
  std::string text;
  Usage usage;
};

// Called on one of the engine's emitter threads (emitter.h; on the engine thread with
// EngineOptions::emitter_threads = 0), all of one request's calls on the same thread, in order;
// implementations must return quickly and never block on the client (buffer, then write
// asynchronously).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // One sampled token, in order, with the text that became final with it (whole UTF-8
  // characters; possibly empty).
  virtual void OnToken(const GeneratedToken& token, std::string_view text) = 0;
  // Only for a request with prompt_logprobs >= 0: every token of its prompt (BOS excluded), in
  // order, in one or more calls before its first OnToken.
  virtual void OnPromptTokens(absl::Span<const PromptToken> tokens) { (void)tokens; }
  // Exactly once, last. OK: the generation ended for `result.reason`. Otherwise the request
  // failed (NOT_FOUND, ABORTED, INVALID_ARGUMENT, CANCELLED after Engine::Cancel, ...) and
  // `result.usage` says how far it got.
  virtual void OnFinish(const absl::Status& status, const GenerationResult& result) = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_TOKEN_SINK_H_
