// The structured-output fields of an OpenAI request: OpenAI's response_format and vLLM's
// guided_json, guided_regex and guided_grammar (at most one of them), compiled into the request's
// constraint.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_CONSTRAINT_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_CONSTRAINT_H_

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/transport/openai_request.h"

namespace linserve {

// Compiles the constraint `body` asks for (none: `out` is left as it is) through
// context.constraints into out.generate.constraint, and sets out.constraint_field. Errors name the
// field that carried it ("response_format.json_schema.schema: ..."); guided_choice is refused.
absl::Status ParseOpenAiConstraint(const nlohmann::json& body, const OpenAiContext& context,
                                   OpenAiRequest& out);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_CONSTRAINT_H_
