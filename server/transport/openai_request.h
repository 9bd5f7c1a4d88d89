// OpenAI-compatible requests (POST /v1/completions and /v1/chat/completions) parsed into the
// engine's GenerateRequest: the fields' typed readers are in openai_json_fields.h, the
// structured-output fields in openai_constraint.h. JSON stays in the transport's openai_*
// files: nothing below the transport sees it.
//
// Every error names the OpenAI field at fault ("temperature", "messages[2].role", "stop[1]") as
// the first word of its message; ToApiError (openai_error.h) puts that word in the error's
// "param".
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_REQUEST_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"
#include "server/constraints/compiled_constraint.h"
#include "server/engine/request.h"
#include "server/transport/chat_template.h"

namespace linserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  // What the engine runs; its top_logprobs is at least 1 when logprobs are reported (the
  // engine reports a token's own logprob only along with alternatives).
  GenerateRequest generate;
  bool stream = false;
  // stream_options.include_usage: a last chunk with the usage (and "usage": null on the others).
  bool include_usage = false;
  // Completions' echo: the prompt's text (and with logprobs its tokens' logprobs, from the
  // engine's prompt_logprobs) comes before the completion's.
  bool echo = false;
  // vLLM's return_token_ids: each choice carries the ids of its generated tokens (token_ids)
  // and the prompt's (prompt_token_ids: the choice's on completions, the response's on chat).
  // Default: false; true for a model without a tokenizer, whose text is always empty.
  bool return_token_ids = false;
  // Whether each token's logprob is reported, and with how many alternatives.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // The field the client set the token budget with ("max_tokens" or "max_completion_tokens"),
  // for the engine's errors.
  std::string max_tokens_field = "max_tokens";
  // The field the client set the constraint with ("response_format", "guided_json",
  // "guided_regex" or "guided_grammar"; "" without one), for the engine's errors.
  std::string constraint_field;
};

// Deepest nesting of arrays and objects a request body may have (the OpenAI requests this server
// reads nest at most 5 deep); a deeper one is refused before it is parsed.
inline constexpr int kMaxJsonDepth = 64;
// Most logprob entries (each token's own and its alternatives: max_tokens x (1 + top_logprobs))
// a non-streamed answer may hold: it is built whole in memory before it is sent, a few hundred
// bytes an entry. Streamed answers are sent token by token and are not limited by it.
inline constexpr int64_t kMaxWholeAnswerLogprobs = 32768;

// What ParseOpenAiRequest needs of the server.
struct OpenAiContext {
  // The model's id in /v1/models; a request's "model" must name it.
  std::string model_id;
  const Tokenizer* tokenizer = nullptr;
  RequestLimits limits;
  // nullptr: the model has no chat template and chat completions are refused.
  const ChatTemplate* chat_template = nullptr;
  // Compiles response_format and the guided_* constraints (the engine's). Required.
  ConstraintCache* constraints = nullptr;
};

// Parses a request body. Unknown fields are ignored (as OpenAI does); null means unset. Beyond
// OpenAI's fields: top_k, min_p, repetition_penalty, guided_json, guided_regex, guided_grammar,
// return_token_ids (vLLM's names), ignore_eos, and session_id (continue a server-side session, POST
// /v1/sessions). The constraint (response_format or one guided_* field, at most one of them) is
// compiled here, on the caller's thread, through context.constraints; its errors name the field
// that carried it ("response_format.json_schema.schema: ...").
// INVALID_ARGUMENT naming the field and its limit (a body nested deeper than kMaxJsonDepth; a
// non-streamed request with logprobs whose answer could hold more than kMaxWholeAnswerLogprobs
// entries); NOT_FOUND for another model. Value ranges of
// the sampling fields are the engine's, checked once, by Engine::Submit
// (ValidateGenerateRequest); RenameEngineError names the OpenAI field in its error.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                 const OpenAiContext& context,
                                                 std::string request_id);

// An engine error about `request` with the engine's field name (generate.proto's) replaced by
// the one the client set ("sampling.top_p" -> "top_p", "max_new_tokens" -> "max_tokens",
// "constraint" -> "response_format").
absl::Status RenameEngineError(const absl::Status& status, const OpenAiRequest& request);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_REQUEST_H_
