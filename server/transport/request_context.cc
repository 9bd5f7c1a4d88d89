#include "server/transport/request_context.h"

#include <utility>

#include "server/sessions/session_id.h"

namespace linserve {
namespace {

constexpr size_t kMaxRequestIdBytes = 64;

bool IsRequestId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id) {
    if (c <= ' ' || c >= 127) return false;
  }
  return true;
}

}  // namespace

RequestContext::RequestContext(absl::StatusOr<std::string> tenant,
                               std::optional<absl::string_view> request_id)
    : auth_status_(tenant.status()) {
  if (tenant.ok()) tenant_ = *std::move(tenant);
  if (request_id.has_value() && IsRequestId(*request_id)) {
    request_id_ = std::string(*request_id);
  } else {
    absl::StatusOr<std::string> random = RandomHex(kRequestIdBytes);
    request_id_ = random.ok() ? *std::move(random) : "unnamed";
  }
}

RequestContext RequestContext::ForGrpc(const Authenticator& auth,
                                       const grpc::ServerContextBase& call) {
  std::optional<absl::string_view> request_id;
  const auto& metadata = call.client_metadata();
  if (auto it = metadata.find("x-request-id"); it != metadata.end()) {
    request_id = absl::string_view(it->second.data(), it->second.size());
  }
  return RequestContext(auth.Authenticate(call), request_id);
}

RequestContext RequestContext::ForHttp(const Authenticator& auth,
                                       std::optional<absl::string_view> authorization,
                                       std::optional<absl::string_view> request_id) {
  return RequestContext(auth.AuthenticateHttp(authorization), request_id);
}

void RequestContext::Apply(GenerateRequest& request) const { request.tenant = tenant_; }

}  // namespace linserve
