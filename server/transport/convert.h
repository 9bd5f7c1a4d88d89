// Conversions between the wire schema (linserve.v1) and the engine's native types. The one place
// where protobuf messages meet engine types; validation of values stays in the engine.
#ifndef LINSERVE_SERVER_TRANSPORT_CONVERT_H_
#define LINSERVE_SERVER_TRANSPORT_CONVERT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "linserve/v1/generate.pb.h"
#include "linserve/v1/model.pb.h"
#include "linserve/v1/session.pb.h"
#include "model/format/config.h"
#include "model/tokenizer/tokenizer.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/constraint_spec.h"
#include "server/engine/engine.h"
#include "server/engine/request.h"
#include "server/engine/token_sink.h"

namespace linserve {

// absl codes and gRPC codes share their numbering.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The constraint as a spec; nullopt when no kind is set (no constraint).
std::optional<ConstraintSpec> FromProto(const v1::Constraint& in);

// Parses a Generate request: tokenizes a text prompt (TokenizeText: bounded by
// limits.max_prompt_bytes and max_prompt_tokens), fills unset fields with their defaults, draws
// a seed when none is given and compiles the constraint through `constraints` (on the calling
// thread; errors name "constraint.<kind>"). Every repeated or text field's size is checked
// against `limits` (a constraint's by its compiler, against the cache's ConstraintLimits) before
// it is tokenized or compiled, so a request's cost here is bounded by the limits whatever the
// message holds. Errors (INVALID_ARGUMENT) name the proto field and the limit; value checks
// happen in Engine::Submit.
absl::StatusOr<GenerateRequest> FromProto(const v1::GenerateRequest& in, const Tokenizer& tokenizer,
                                          const RequestLimits& limits, ConstraintCache& constraints,
                                          std::string request_id);

v1::FinishReason ToProto(FinishReason reason);
void ToProto(const GeneratedToken& token, v1::GeneratedToken* out);
void ToProto(const PromptToken& token, v1::PromptToken* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const SessionInfo& info, v1::Session* out);
// What config.json says: the fields of the single-block schema (filled only when
// config.IsSingleBlock(), else 0 and empty), the layer list with each layer's state bytes, and
// the final norm of a pre-norm model. Whatever the layer kinds: each component is its kind's
// name and parameters.
void ToProto(const ModelConfig& config, v1::ModelInfo* out);
// Model, limits and current load.
void ToProto(const Engine& engine, v1::GetModelInfoResponse* out);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_CONVERT_H_
