// What every RPC handler of the linserve.v1 service shares.
#ifndef LINSERVE_SERVER_TRANSPORT_SERVICE_ENV_H_
#define LINSERVE_SERVER_TRANSPORT_SERVICE_ENV_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "grpcpp/support/status.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/transport/auth.h"

namespace linserve {

class ServiceEnv {
 public:
  ServiceEnv(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
             int32_t export_chunk_bytes)
      : engine_(engine), auth_(auth), metrics_(metrics), export_chunk_bytes_(export_chunk_bytes) {}

  Engine& engine() const { return engine_; }
  const Authenticator& auth() const { return auth_; }
  int32_t export_chunk_bytes() const { return export_chunk_bytes_; }

  // Counts one finished RPC in linserve_grpc_requests_total{method, code} and logs failures
  // with the caller's tenant (`tenant`: "" for the default tenant or a caller not
  // authenticated; never a token).
  void RecordRpc(std::string_view method, std::string_view tenant,
                 const grpc::Status& status) const;

 private:
  Engine& engine_;
  const Authenticator& auth_;
  MetricsRegistry& metrics_;
  const int32_t export_chunk_bytes_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_SERVICE_ENV_H_
