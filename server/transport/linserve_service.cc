#include "server/transport/linserve_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/sessions/session_id.h"
#include "server/transport/convert.h"
#include "server/transport/generate_reactor.h"
#include "server/transport/session_streams.h"

namespace linserve {
namespace {

constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;

// One unary call: its default reactor, its caller (RequestContext) and its method's name, said
// once. Copied into the engine's callbacks, which finish the call.
class UnaryCall {
 public:
  // A caller not authenticated is answered at once: then rejected() is true.
  UnaryCall(const ServiceEnv& env, grpc::CallbackServerContext* context, const char* method)
      : UnaryCall(env, context->DefaultReactor(), method,
                  RequestContext::ForGrpc(env.auth(), *context)) {}

  bool rejected() const { return rejected_; }
  const std::string& tenant() const { return tenant_; }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  // Finishes the call with `status` and counts it; returns the reactor for the handler to return.
  grpc::ServerUnaryReactor* Finish(const absl::Status& status) const {
    return Finish(ToGrpcStatus(status));
  }
  grpc::ServerUnaryReactor* Finish(const grpc::Status& status) const {
    env_->RecordRpc(method_, tenant_, status);
    reactor_->Finish(status);
    return reactor_;
  }

 private:
  const ServiceEnv* env_;
  grpc::ServerUnaryReactor* reactor_;
  const char* method_;
  std::string tenant_;
  bool rejected_ = false;

  UnaryCall(const ServiceEnv& env, grpc::ServerUnaryReactor* reactor, const char* method,
            const RequestContext& call)
      : env_(&env),
        reactor_(reactor),
        method_(method),
        tenant_(call.tenant()),
        rejected_(!call.authenticated()) {
    if (rejected_) Finish(call.auth_status());
  }
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* LinServeService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(env_, context, request);
}

grpc::ServerUnaryReactor* LinServeService::Tokenize(grpc::CallbackServerContext* context,
                                                    const v1::TokenizeRequest* request,
                                                    v1::TokenizeResponse* response) {
  const UnaryCall call(env_, context, "Tokenize");
  if (call.rejected()) return call.reactor();
  // Bounded like a prompt: a text that could not be one is refused before costing more.
  absl::StatusOr<std::vector<TokenId>> ids = TokenizeText(
      request->text(), "text", *env_.engine().model().tokenizer, env_.engine().options().requests);
  if (!ids.ok()) {
    return call.Finish(ids.status());
  }
  response->mutable_token_ids()->Assign(ids->begin(), ids->end());
  return call.Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* LinServeService::Detokenize(grpc::CallbackServerContext* context,
                                                      const v1::DetokenizeRequest* request,
                                                      v1::DetokenizeResponse* response) {
  const UnaryCall call(env_, context, "Detokenize");
  if (call.rejected()) return call.reactor();
  // Bounded like a prompt: the text grows with the ids (up to a token's longest piece each).
  const int32_t max_ids = env_.engine().options().requests.max_prompt_tokens;
  if (request->token_ids_size() > max_ids) {
    return call.Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("token_ids: ", request->token_ids_size(),
                                  " ids exceed the limit of ", max_ids, " (max_prompt_tokens)")));
  }
  const Tokenizer& tokenizer = *env_.engine().model().tokenizer;
  if (!tokenizer.has_text()) {
    return call.Finish(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "token_ids: this model has no tokenizer (config.json tokenizer \"none\"): its tokens "
        "stand for no text"));
  }
  const std::vector<TokenId> ids(request->token_ids().begin(), request->token_ids().end());
  absl::StatusOr<std::string> text = tokenizer.Decode(ids);
  if (!text.ok()) {
    return call.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    absl::StrCat("token_ids: ", text.status().message())));
  }
  response->set_text(*std::move(text));
  return call.Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* LinServeService::GetModelInfo(grpc::CallbackServerContext* context,
                                                        const v1::GetModelInfoRequest*,
                                                        v1::GetModelInfoResponse* response) {
  const UnaryCall call(env_, context, "GetModelInfo");
  if (call.rejected()) return call.reactor();
  ToProto(env_.engine(), response);
  return call.Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* LinServeService::CreateSession(grpc::CallbackServerContext* context,
                                                         const v1::CreateSessionRequest* request,
                                                         v1::Session* response) {
  const UnaryCall call(env_, context, "CreateSession");
  if (call.rejected()) return call.reactor();
  std::optional<SessionId> proposed;
  if (!request->session_id().empty()) {
    absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
    if (!id.ok()) {
      return call.Finish(id.status());
    }
    proposed = *std::move(id);
  }
  env_.engine().CreateSession(
      call.tenant(),
      [call, response](absl::StatusOr<SessionInfo> info) {
        if (info.ok()) ToProto(*info, response);
        call.Finish(info.status());
      },
      std::move(proposed));
  return call.reactor();
}

grpc::ServerUnaryReactor* LinServeService::GetSession(grpc::CallbackServerContext* context,
                                                      const v1::GetSessionRequest* request,
                                                      v1::Session* response) {
  const UnaryCall call(env_, context, "GetSession");
  if (call.rejected()) return call.reactor();
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    return call.Finish(id.status());
  }
  env_.engine().GetSession(call.tenant(), *id, [call, response](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    call.Finish(info.status());
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* LinServeService::ListSessions(grpc::CallbackServerContext* context,
                                                        const v1::ListSessionsRequest* request,
                                                        v1::ListSessionsResponse* response) {
  const UnaryCall call(env_, context, "ListSessions");
  if (call.rejected()) return call.reactor();
  if (request->page_size() < 0) {
    return call.Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("page_size: must be in [0, ", kMaxPageSize,
                                  "] (0 = ", kDefaultPageSize, "), got ", request->page_size())));
  }
  const int32_t limit =
      request->page_size() == 0 ? kDefaultPageSize : std::min(request->page_size(), kMaxPageSize);
  std::optional<SessionId> after;
  if (!request->page_token().empty()) {
    absl::StatusOr<SessionId> token = ParseSessionId(request->page_token(), "page_token");
    if (!token.ok()) {
      return call.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "page_token: not a token from a previous ListSessions page"));
    }
    after = *std::move(token);
  }
  env_.engine().ListSessions(call.tenant(), std::move(after), limit,
                             [call, response](absl::StatusOr<SessionPage> page) {
                               if (page.ok()) {
                                 for (const SessionInfo& info : page->sessions)
                                   ToProto(info, response->add_sessions());
                                 if (page->next_after.has_value())
                                   response->set_next_page_token(page->next_after->value);
                               }
                               call.Finish(page.status());
                             });
  return call.reactor();
}

grpc::ServerUnaryReactor* LinServeService::ForkSession(grpc::CallbackServerContext* context,
                                                       const v1::ForkSessionRequest* request,
                                                       v1::Session* response) {
  const UnaryCall call(env_, context, "ForkSession");
  if (call.rejected()) return call.reactor();
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    return call.Finish(id.status());
  }
  auto done = [call, response](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    call.Finish(info.status());
  };
  if (request->has_num_tokens()) {
    env_.engine().ForkSessionAt(call.tenant(), *id, request->num_tokens(), std::move(done));
  } else {
    env_.engine().ForkSession(call.tenant(), *id, std::move(done));
  }
  return call.reactor();
}

grpc::ServerUnaryReactor* LinServeService::RewindSession(grpc::CallbackServerContext* context,
                                                         const v1::RewindSessionRequest* request,
                                                         v1::Session* response) {
  const UnaryCall call(env_, context, "RewindSession");
  if (call.rejected()) return call.reactor();
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    return call.Finish(id.status());
  }
  env_.engine().RewindSession(call.tenant(), *id, request->num_tokens(),
                              [call, response](absl::StatusOr<SessionInfo> info) {
                                if (info.ok()) ToProto(*info, response);
                                call.Finish(info.status());
                              });
  return call.reactor();
}

grpc::ServerUnaryReactor* LinServeService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const v1::DeleteSessionRequest* request,
                                                         v1::DeleteSessionResponse*) {
  const UnaryCall call(env_, context, "DeleteSession");
  if (call.rejected()) return call.reactor();
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    return call.Finish(id.status());
  }
  env_.engine().DeleteSession(call.tenant(), *id,
                              [call](absl::Status status) { call.Finish(status); });
  return call.reactor();
}

grpc::ServerWriteReactor<v1::ExportSessionChunk>* LinServeService::ExportSession(
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) {
  return new ExportReactor(env_, context, request);
}

grpc::ServerReadReactor<v1::ImportSessionChunk>* LinServeService::ImportSession(
    grpc::CallbackServerContext* context, v1::Session* response) {
  return new ImportReactor(env_, context, response);
}

}  // namespace linserve
