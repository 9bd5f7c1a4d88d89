#include "server/transport/service_env.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

std::string TenantForLog(std::string_view tenant) {
  return tenant.empty() ? std::string("default tenant")
                        : absl::StrCat("tenant ", absl::string_view(tenant.data(), tenant.size()));
}

}  // namespace

void ServiceEnv::RecordRpc(std::string_view method, std::string_view tenant,
                           const grpc::Status& status) const {
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  metrics_
      .GetCounter("linserve_grpc_requests_total", "Finished gRPC calls by method and status",
                  {{"method", std::string(method)}, {"code", code}})
      .Increment();
  if (status.error_code() == grpc::StatusCode::INTERNAL ||
      status.error_code() == grpc::StatusCode::UNKNOWN) {
    spdlog::error("rpc {} ({}): {} {}", method, TenantForLog(tenant), code,
                  status.error_message());
  } else if (!status.ok()) {
    spdlog::debug("rpc {} ({}): {} {}", method, TenantForLog(tenant), code,
                  status.error_message());
  }
}

}  // namespace linserve
