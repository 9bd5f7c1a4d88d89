#include "client/loadtest/grpc_load_target.h"

#include <memory>

namespace linserve::loadtest {
namespace {

CallOptions WithTimeout(absl::Duration timeout) {
  CallOptions options;
  options.timeout = timeout;
  return options;
}

}  // namespace

GenerateOutcome GrpcLoadTarget::Generate(const GenerateCall& call,
                                         absl::FunctionRef<void(int32_t)> on_tokens) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Assign(call.prompt.begin(), call.prompt.end());
  request.set_session_id(call.session_id);
  request.set_max_new_tokens(call.max_new_tokens);
  request.mutable_sampling()->set_temperature(call.temperature);
  request.mutable_sampling()->set_seed(call.seed);
  if (call.top_k > 0) request.mutable_sampling()->set_top_k(call.top_k);
  if (call.top_p < 1.0f) request.mutable_sampling()->set_top_p(call.top_p);
  request.set_ignore_eos(call.ignore_eos);
  if (constraint_.has_value()) *request.mutable_constraint() = *constraint_;
  // The callback API reads every stream on gRPC's few threads; a blocking reader per stream
  // would wake one client thread per message and steal more CPU from a server on the same host.
  GenerateOutcome outcome;
  std::unique_ptr<GenerateStream> stream = client_.StartGenerate(
      request,
      [&](const v1::GenerateResponse& response) {
        for (const v1::GeneratedToken& token : response.tokens()) {
          outcome.tokens.push_back(token.id());
        }
        if (response.tokens_size() > 0) on_tokens(response.tokens_size());
        if (response.has_usage()) {
          outcome.prompt_tokens = response.usage().prompt_tokens();
          outcome.cached_prompt_tokens = response.usage().cached_prompt_tokens();
        }
      },
      WithTimeout(call.timeout));
  outcome.status = stream->Wait();
  return outcome;
}

absl::StatusOr<std::string> GrpcLoadTarget::CreateSession(absl::Duration timeout) {
  absl::StatusOr<v1::Session> session = client_.CreateSession(WithTimeout(timeout));
  if (!session.ok()) return session.status();
  return session->id();
}

absl::StatusOr<std::string> GrpcLoadTarget::ForkSession(const std::string& id,
                                                        absl::Duration timeout) {
  absl::StatusOr<v1::Session> session = client_.ForkSession(id, WithTimeout(timeout));
  if (!session.ok()) return session.status();
  return session->id();
}

absl::StatusOr<int64_t> GrpcLoadTarget::ExportSession(const std::string& id,
                                                      absl::Duration timeout) {
  absl::StatusOr<std::string> snapshot = client_.ExportSession(id, WithTimeout(timeout));
  if (!snapshot.ok()) return snapshot.status();
  return static_cast<int64_t>(snapshot->size());
}

absl::Status GrpcLoadTarget::DeleteSession(const std::string& id, absl::Duration timeout) {
  return client_.DeleteSession(id, WithTimeout(timeout));
}

}  // namespace linserve::loadtest
