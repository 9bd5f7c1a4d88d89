#include "server/transport/service_env.h"

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace linserve {

void ServiceEnv::RecordRpc(std::string_view method, const grpc::Status& status) const {
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  metrics_
      .GetCounter("linserve_grpc_requests_total", "Finished gRPC calls by method and status",
                  {{"method", std::string(method)}, {"code", code}})
      .Increment();
  if (status.error_code() == grpc::StatusCode::INTERNAL ||
      status.error_code() == grpc::StatusCode::UNKNOWN) {
    spdlog::error("rpc {}: {} {}", method, code, status.error_message());
  } else if (!status.ok()) {
    spdlog::debug("rpc {}: {} {}", method, code, status.error_message());
  }
}

}  // namespace linserve
