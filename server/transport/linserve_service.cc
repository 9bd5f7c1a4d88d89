#include "server/transport/linserve_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/session_id.h"
#include "server/transport/convert.h"
#include "server/transport/generate_reactor.h"
#include "server/transport/session_streams.h"

namespace linserve {
namespace {

constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;

// Finishes a unary call and counts it.
void FinishUnary(const ServiceEnv& env, grpc::ServerUnaryReactor* reactor, const char* method,
                 const grpc::Status& status) {
  env.RecordRpc(method, status);
  reactor->Finish(status);
}

// The default reactor of a unary call, already finished with UNAUTHENTICATED when the token is
// wrong (then *rejected is true).
grpc::ServerUnaryReactor* Begin(const ServiceEnv& env, grpc::CallbackServerContext* context,
                                const char* method, bool* rejected) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status auth = env.auth().Check(*context);
  *rejected = !auth.ok();
  if (*rejected) FinishUnary(env, reactor, method, auth);
  return reactor;
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* LinServeService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(env_, context, request);
}

grpc::ServerUnaryReactor* LinServeService::Tokenize(grpc::CallbackServerContext* context,
                                                    const v1::TokenizeRequest* request,
                                                    v1::TokenizeResponse* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "Tokenize", &rejected);
  if (rejected) return reactor;
  // Bounded like a prompt: a text that could not be one is refused before costing more.
  absl::StatusOr<std::vector<TokenId>> ids = TokenizeText(
      request->text(), "text", *env_.engine().model().tokenizer, env_.engine().options().requests);
  if (!ids.ok()) {
    FinishUnary(env_, reactor, "Tokenize", ToGrpcStatus(ids.status()));
    return reactor;
  }
  response->mutable_token_ids()->Assign(ids->begin(), ids->end());
  FinishUnary(env_, reactor, "Tokenize", grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::Detokenize(grpc::CallbackServerContext* context,
                                                      const v1::DetokenizeRequest* request,
                                                      v1::DetokenizeResponse* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "Detokenize", &rejected);
  if (rejected) return reactor;
  const std::vector<TokenId> ids(request->token_ids().begin(), request->token_ids().end());
  absl::StatusOr<std::string> text = env_.engine().model().tokenizer->Decode(ids);
  if (!text.ok()) {
    FinishUnary(env_, reactor, "Detokenize",
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("token_ids: ", text.status().message())));
    return reactor;
  }
  response->set_text(*std::move(text));
  FinishUnary(env_, reactor, "Detokenize", grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::GetModelInfo(grpc::CallbackServerContext* context,
                                                        const v1::GetModelInfoRequest*,
                                                        v1::GetModelInfoResponse* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "GetModelInfo", &rejected);
  if (rejected) return reactor;
  ToProto(env_.engine(), response);
  FinishUnary(env_, reactor, "GetModelInfo", grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::CreateSession(grpc::CallbackServerContext* context,
                                                         const v1::CreateSessionRequest*,
                                                         v1::Session* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "CreateSession", &rejected);
  if (rejected) return reactor;
  env_.engine().CreateSession([this, reactor, response](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    FinishUnary(env_, reactor, "CreateSession", ToGrpcStatus(info.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::GetSession(grpc::CallbackServerContext* context,
                                                      const v1::GetSessionRequest* request,
                                                      v1::Session* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "GetSession", &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "GetSession", ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().GetSession(*id, [this, reactor, response](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    FinishUnary(env_, reactor, "GetSession", ToGrpcStatus(info.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::ListSessions(grpc::CallbackServerContext* context,
                                                        const v1::ListSessionsRequest* request,
                                                        v1::ListSessionsResponse* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "ListSessions", &rejected);
  if (rejected) return reactor;
  if (request->page_size() < 0) {
    FinishUnary(env_, reactor, "ListSessions",
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("page_size: must be in [0, ", kMaxPageSize,
                                          "] (0 = ", kDefaultPageSize, "), got ",
                                          request->page_size())));
    return reactor;
  }
  const int32_t limit = request->page_size() == 0
                            ? kDefaultPageSize
                            : std::min(request->page_size(), kMaxPageSize);
  std::optional<SessionId> after;
  if (!request->page_token().empty()) {
    absl::StatusOr<SessionId> token = ParseSessionId(request->page_token(), "page_token");
    if (!token.ok()) {
      FinishUnary(env_, reactor, "ListSessions",
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "page_token: not a token from a previous ListSessions page"));
      return reactor;
    }
    after = *std::move(token);
  }
  env_.engine().ListSessions(
      std::move(after), limit, [this, reactor, response](absl::StatusOr<SessionPage> page) {
        if (page.ok()) {
          for (const SessionInfo& info : page->sessions) ToProto(info, response->add_sessions());
          if (page->next_after.has_value()) response->set_next_page_token(page->next_after->value);
        }
        FinishUnary(env_, reactor, "ListSessions", ToGrpcStatus(page.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::ForkSession(grpc::CallbackServerContext* context,
                                                       const v1::ForkSessionRequest* request,
                                                       v1::Session* response) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "ForkSession", &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "ForkSession", ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().ForkSession(*id, [this, reactor, response](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    FinishUnary(env_, reactor, "ForkSession", ToGrpcStatus(info.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const v1::DeleteSessionRequest* request,
                                                         v1::DeleteSessionResponse*) {
  bool rejected = false;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "DeleteSession", &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "DeleteSession", ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().DeleteSession(*id, [this, reactor](absl::Status status) {
    FinishUnary(env_, reactor, "DeleteSession", ToGrpcStatus(status));
  });
  return reactor;
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
