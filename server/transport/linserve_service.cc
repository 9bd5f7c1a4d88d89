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

// Finishes a unary call of `tenant` and counts it.
void FinishUnary(const ServiceEnv& env, grpc::ServerUnaryReactor* reactor, const char* method,
                 const std::string& tenant, const grpc::Status& status) {
  env.RecordRpc(method, tenant, status);
  reactor->Finish(status);
}

// The default reactor of a unary call and, in *tenant, the caller's principal (auth.h). When
// the call is not authenticated the reactor is already finished with UNAUTHENTICATED and
// *rejected is true.
grpc::ServerUnaryReactor* Begin(const ServiceEnv& env, grpc::CallbackServerContext* context,
                                const char* method, std::string* tenant, bool* rejected) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> principal = env.auth().Authenticate(*context);
  *rejected = !principal.ok();
  if (*rejected) {
    FinishUnary(env, reactor, method, "", ToGrpcStatus(principal.status()));
  } else {
    *tenant = *std::move(principal);
  }
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
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "Tokenize", &tenant, &rejected);
  if (rejected) return reactor;
  // Bounded like a prompt: a text that could not be one is refused before costing more.
  absl::StatusOr<std::vector<TokenId>> ids = TokenizeText(
      request->text(), "text", *env_.engine().model().tokenizer, env_.engine().options().requests);
  if (!ids.ok()) {
    FinishUnary(env_, reactor, "Tokenize", tenant, ToGrpcStatus(ids.status()));
    return reactor;
  }
  response->mutable_token_ids()->Assign(ids->begin(), ids->end());
  FinishUnary(env_, reactor, "Tokenize", tenant, grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::Detokenize(grpc::CallbackServerContext* context,
                                                      const v1::DetokenizeRequest* request,
                                                      v1::DetokenizeResponse* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "Detokenize", &tenant, &rejected);
  if (rejected) return reactor;
  // Bounded like a prompt: the text grows with the ids (up to a token's longest piece each).
  const int32_t max_ids = env_.engine().options().requests.max_prompt_tokens;
  if (request->token_ids_size() > max_ids) {
    FinishUnary(env_, reactor, "Detokenize", tenant,
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("token_ids: ", request->token_ids_size(),
                                          " ids exceed the limit of ", max_ids,
                                          " (max_prompt_tokens)")));
    return reactor;
  }
  const std::vector<TokenId> ids(request->token_ids().begin(), request->token_ids().end());
  absl::StatusOr<std::string> text = env_.engine().model().tokenizer->Decode(ids);
  if (!text.ok()) {
    FinishUnary(env_, reactor, "Detokenize", tenant,
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("token_ids: ", text.status().message())));
    return reactor;
  }
  response->set_text(*std::move(text));
  FinishUnary(env_, reactor, "Detokenize", tenant, grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::GetModelInfo(grpc::CallbackServerContext* context,
                                                        const v1::GetModelInfoRequest*,
                                                        v1::GetModelInfoResponse* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "GetModelInfo", &tenant, &rejected);
  if (rejected) return reactor;
  ToProto(env_.engine(), response);
  FinishUnary(env_, reactor, "GetModelInfo", tenant, grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::CreateSession(grpc::CallbackServerContext* context,
                                                         const v1::CreateSessionRequest* request,
                                                         v1::Session* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "CreateSession", &tenant, &rejected);
  if (rejected) return reactor;
  std::optional<SessionId> proposed;
  if (!request->session_id().empty()) {
    absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
    if (!id.ok()) {
      FinishUnary(env_, reactor, "CreateSession", tenant, ToGrpcStatus(id.status()));
      return reactor;
    }
    proposed = *std::move(id);
  }
  env_.engine().CreateSession(
      tenant,
      [this, reactor, response, tenant](absl::StatusOr<SessionInfo> info) {
        if (info.ok()) ToProto(*info, response);
        FinishUnary(env_, reactor, "CreateSession", tenant, ToGrpcStatus(info.status()));
      },
      std::move(proposed));
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::GetSession(grpc::CallbackServerContext* context,
                                                      const v1::GetSessionRequest* request,
                                                      v1::Session* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "GetSession", &tenant, &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "GetSession", tenant, ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().GetSession(
      tenant, *id, [this, reactor, response, tenant](absl::StatusOr<SessionInfo> info) {
        if (info.ok()) ToProto(*info, response);
        FinishUnary(env_, reactor, "GetSession", tenant, ToGrpcStatus(info.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::ListSessions(grpc::CallbackServerContext* context,
                                                        const v1::ListSessionsRequest* request,
                                                        v1::ListSessionsResponse* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "ListSessions", &tenant, &rejected);
  if (rejected) return reactor;
  if (request->page_size() < 0) {
    FinishUnary(env_, reactor, "ListSessions", tenant,
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
      FinishUnary(env_, reactor, "ListSessions", tenant,
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "page_token: not a token from a previous ListSessions page"));
      return reactor;
    }
    after = *std::move(token);
  }
  env_.engine().ListSessions(
      tenant, std::move(after), limit,
      [this, reactor, response, tenant](absl::StatusOr<SessionPage> page) {
        if (page.ok()) {
          for (const SessionInfo& info : page->sessions) ToProto(info, response->add_sessions());
          if (page->next_after.has_value()) response->set_next_page_token(page->next_after->value);
        }
        FinishUnary(env_, reactor, "ListSessions", tenant, ToGrpcStatus(page.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::ForkSession(grpc::CallbackServerContext* context,
                                                       const v1::ForkSessionRequest* request,
                                                       v1::Session* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "ForkSession", &tenant, &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "ForkSession", tenant, ToGrpcStatus(id.status()));
    return reactor;
  }
  auto done = [this, reactor, response, tenant](absl::StatusOr<SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    FinishUnary(env_, reactor, "ForkSession", tenant, ToGrpcStatus(info.status()));
  };
  if (request->has_num_tokens()) {
    env_.engine().ForkSessionAt(tenant, *id, request->num_tokens(), std::move(done));
  } else {
    env_.engine().ForkSession(tenant, *id, std::move(done));
  }
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::RewindSession(grpc::CallbackServerContext* context,
                                                         const v1::RewindSessionRequest* request,
                                                         v1::Session* response) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "RewindSession", &tenant, &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "RewindSession", tenant, ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().RewindSession(tenant, *id, request->num_tokens(),
                              [this, reactor, response, tenant](absl::StatusOr<SessionInfo> info) {
                                if (info.ok()) ToProto(*info, response);
                                FinishUnary(env_, reactor, "RewindSession", tenant,
                                            ToGrpcStatus(info.status()));
                              });
  return reactor;
}

grpc::ServerUnaryReactor* LinServeService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const v1::DeleteSessionRequest* request,
                                                         v1::DeleteSessionResponse*) {
  bool rejected = false;
  std::string tenant;
  grpc::ServerUnaryReactor* reactor = Begin(env_, context, "DeleteSession", &tenant, &rejected);
  if (rejected) return reactor;
  absl::StatusOr<SessionId> id = ParseSessionId(request->session_id(), "session_id");
  if (!id.ok()) {
    FinishUnary(env_, reactor, "DeleteSession", tenant, ToGrpcStatus(id.status()));
    return reactor;
  }
  env_.engine().DeleteSession(tenant, *id, [this, reactor, tenant](absl::Status status) {
    FinishUnary(env_, reactor, "DeleteSession", tenant, ToGrpcStatus(status));
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
