// GenerateRequest: one generation as the engine sees it, already parsed out of the wire format.
// Field names follow proto/linserve/v1/generate.proto so that validation errors name the field
// the client actually set.
#ifndef LINSERVE_SERVER_ENGINE_REQUEST_H_
#define LINSERVE_SERVER_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/format/config.h"
#include "model/backend/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "model/types.h"
#include "server/constraints/compiled_constraint.h"
#include "server/sessions/session_id.h"

namespace linserve {

// Bytes per token that the default max_prompt_bytes allows (max_prompt_bytes defaults to this
// times max_prompt_tokens). Generous for real text: the byte tokenizer takes 1 byte per token,
// SentencePiece pieces are at most 16 characters by default and English text averages about 4
// bytes per piece; only text dominated by runs of whitespace (which SentencePiece collapses)
// can fit max_prompt_tokens and still exceed it.
inline constexpr int64_t kDefaultPromptBytesPerToken = 16;

// Per-request limits the server enforces; every one is reported to clients in ModelInfo's
// limits (ServerLimits in proto/linserve/v1/model.proto).
struct RequestLimits {
  // Upper bound of max_new_tokens. Default: 4096.
  int32_t max_new_tokens = 4096;
  // Tokens one request may feed: its prompt, a prepended BOS and whatever an earlier cancelled
  // request on the same session left unprocessed. Default: 65536.
  int32_t max_prompt_tokens = 65536;
  // Bytes of a text prompt (and of a Tokenize text), checked before any tokenizing: the bound
  // on what a text can cost before max_prompt_tokens can be checked.
  // Default: kDefaultPromptBytesPerToken * 65536 (1 MiB).
  int64_t max_prompt_bytes = kDefaultPromptBytesPerToken * 65536;
  // Number of stop strings. Default: 16.
  int32_t max_stop_strings = 16;
  // Bytes of one stop string. Default: 256.
  int32_t max_stop_string_bytes = 256;
  // Number of stop token ids. Default: 64.
  int32_t max_stop_token_ids = 64;
  // Largest top_logprobs. Default: 20.
  int32_t max_top_logprobs = 20;
  // Largest n (choices per request). Default: 16.
  int32_t max_choices = 16;
};

// max_new_tokens when the client leaves it unset (capped by RequestLimits::max_new_tokens).
inline constexpr int32_t kDefaultMaxNewTokens = 256;

struct GenerateRequest {
  // Names the request in logs. Set by the caller (the transport draws a random one).
  std::string request_id;
  // The tenant the request runs for, as the transport authenticated it ("" without
  // authentication). A session_id of another tenant's session answers NOT_FOUND like an
  // unknown id.
  std::string tenant;
  // The session to continue; nullopt = an ephemeral session freed when the request ends.
  std::optional<SessionId> session_id;
  // Token ids to feed, non-empty. BOS is prepended by the engine when the session is empty.
  std::vector<TokenId> prompt;
  // Tokens to generate at most, in [0, RequestLimits::max_new_tokens]; 0 feeds the prompt and
  // generates nothing (with prompt_logprobs: scores it). Default: kDefaultMaxNewTokens.
  int32_t max_new_tokens = kDefaultMaxNewTokens;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  int32_t top_logprobs = 0;
  // >= 0: every prompt token's logprob and its prompt_logprobs most likely alternatives, from
  // the logits of the chunked prefill (TokenSink::OnPromptTokens); the prompt is then fed whole
  // (no cached prefix state skips it). -1: none. Default: -1.
  int32_t prompt_logprobs = -1;
  // Choices generated for the prompt, in [1, RequestLimits::max_choices]: the prompt is fed
  // once and its state forked (Backend::CopySlot) n − 1 times before its last token, and choice
  // i samples with seed + i (mod 2^64), each through its own sink. Default: 1.
  int32_t n = 1;
  // With a session_id and n > 1 (required then, refused otherwise): the choice, in [0, n), the
  // session continues with; the others run on ephemeral sessions. Default: unset.
  std::optional<int32_t> session_choice;
  // Structured output: the compiled constraint the generated text obeys (the transport compiles
  // it through a ConstraintCache before Submit); nullptr: none. docs/server.md says how it
  // continues on a session.
  std::shared_ptr<const CompiledConstraint> constraint;
};

// Checks every field against `limits` and the model's vocabulary. Errors are INVALID_ARGUMENT
// and name the field (as in generate.proto, e.g. "sampling.top_p", "stop[2]") and the limit.
absl::Status ValidateGenerateRequest(const GenerateRequest& request, const RequestLimits& limits,
                                     const ModelConfig& config);

// Checks limits themselves (each positive); errors name the field of RequestLimits.
absl::Status ValidateRequestLimits(const RequestLimits& limits);

// Tokenizes untrusted text (the proto field `field`, e.g. "prompt.text") at a cost bounded by
// `limits` whatever its size: more than max_prompt_bytes bytes are refused before any
// tokenizing, and tokenizing stops once more than max_prompt_tokens tokens are certain.
// Errors are INVALID_ARGUMENT naming `field` and the limit (or the tokenizer's complaint).
absl::StatusOr<std::vector<TokenId>> TokenizeText(std::string_view text, absl::string_view field,
                                                  const Tokenizer& tokenizer,
                                                  const RequestLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_REQUEST_H_
