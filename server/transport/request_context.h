// RequestContext: what both front ends (gRPC: linserve_service, generate_reactor,
// session_streams; the OpenAI HTTP API: openai_server) establish about a request before it
// reaches the engine, the same way for both: who the caller is (its tenant, or why it is
// refused: auth.h) and the id that names the request in logs and replies.
//
// The request id is the client's own (gRPC "x-request-id" metadata, the HTTP "X-Request-Id"
// header: 1 to 64 printable ASCII characters, no spaces) or else kRequestIdBytes random bytes
// in lowercase hex.
#ifndef LINSERVE_SERVER_TRANSPORT_REQUEST_CONTEXT_H_
#define LINSERVE_SERVER_TRANSPORT_REQUEST_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "server/engine/request.h"
#include "server/transport/auth.h"

namespace linserve {

// Random bytes of a request id the server draws itself.
inline constexpr int kRequestIdBytes = 12;

class RequestContext {
 public:
  // A gRPC call: its tenant from its metadata or client certificate, its id from x-request-id.
  static RequestContext ForGrpc(const Authenticator& auth, const grpc::ServerContextBase& call);
  // An HTTP request: from its Authorization and X-Request-Id headers (nullopt: absent).
  static RequestContext ForHttp(const Authenticator& auth,
                                std::optional<absl::string_view> authorization,
                                std::optional<absl::string_view> request_id);

  // OK, or UNAUTHENTICATED saying what the caller must send.
  const absl::Status& auth_status() const { return auth_status_; }
  bool authenticated() const { return auth_status_.ok(); }
  // The caller's tenant ("" for the default one, and for a caller not authenticated).
  const std::string& tenant() const { return tenant_; }
  const std::string& request_id() const { return request_id_; }

  // Makes `request` (parsed with this context's request id) the caller's: it reaches only its
  // tenant's sessions.
  void Apply(GenerateRequest& request) const;

 private:
  RequestContext(absl::StatusOr<std::string> tenant, std::optional<absl::string_view> request_id);

  absl::Status auth_status_;
  std::string tenant_;
  std::string request_id_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_REQUEST_CONTEXT_H_
