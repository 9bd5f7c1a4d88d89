// BearerTokenAuth: the optional shared-secret check of every linserve.v1 RPC ("authorization:
// Bearer <token>" metadata). grpc.health.v1 and server reflection are exempt: load balancers and
// tools probe them without credentials, and they reveal nothing but the public schema.
#ifndef LINSERVE_SERVER_TRANSPORT_AUTH_H_
#define LINSERVE_SERVER_TRANSPORT_AUTH_H_

#include <optional>
#include <string>

#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace linserve {

class BearerTokenAuth {
 public:
  // An empty token disables the check.
  explicit BearerTokenAuth(const std::string& token);

  bool enabled() const { return !token_.empty(); }
  // OK, or UNAUTHENTICATED saying which metadata is expected. The scheme is matched in any
  // letter case ("Bearer", "bearer", ...); the token is compared in constant time.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;  // "" when disabled
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_AUTH_H_
