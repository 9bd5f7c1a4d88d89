// GrpcServer: the gRPC endpoint. Serves linserve.v1.LinServe over an Engine, the standard
// grpc.health.v1 service (grpc++'s default implementation, overall and per service) and,
// optionally, server reflection; plaintext or TLS; optional bearer-token auth with one tenant
// per token, or mutual TLS with one tenant per client certificate subject (auth.h).
#ifndef LINSERVE_SERVER_TRANSPORT_GRPC_SERVER_H_
#define LINSERVE_SERVER_TRANSPORT_GRPC_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/transport/auth.h"
#include "server/transport/linserve_service.h"
#include "server/transport/service_env.h"

namespace linserve {

struct GrpcServerOptions {
  // host:port to listen on; port 0 picks a free port (see GrpcServer::port()).
  // Default: "0.0.0.0:50051".
  std::string address = "0.0.0.0:50051";
  // PEM certificate chain and private key files; both set = TLS, both empty = plaintext.
  // Default: "" (plaintext).
  std::string tls_cert_file;
  std::string tls_key_file;
  // With TLS: PEM CA certificates that must have signed every client's certificate (mutual
  // TLS; clients without a valid certificate cannot connect); "" = clients need none. A caller
  // sending no bearer token is then the tenant named by its certificate's subject (the
  // Authenticator's certificate_principals must be set exactly then). Default: "".
  std::string tls_client_ca_file;
  // Serve grpc.reflection.v1alpha (grpcurl, grpc_cli). Default: true.
  bool reflection = true;
  // Bytes per ExportSession message. Default: 1 MiB.
  int32_t export_chunk_bytes = 1 << 20;
  // Largest request message gRPC accepts; a larger one is refused by gRPC with
  // RESOURCE_EXHAUSTED before any handler runs. main.cc sizes it to fit the largest prompt text
  // (--max_prompt_bytes) so that the server's own limit, with its message, is the one a client
  // meets. Default: 4 MiB (gRPC's own default).
  int32_t max_receive_message_bytes = 4 << 20;
};

class GrpcServer {
 public:
  // Starts serving (health: SERVING). `engine`, `auth` (shared with the HTTP API) and
  // `metrics` must outlive the server. Errors name the option at fault (unreadable TLS files,
  // an address that cannot be bound).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(Engine& engine,
                                                           const Authenticator& auth,
                                                           MetricsRegistry& metrics,
                                                           const GrpcServerOptions& options);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // The bound port.
  int port() const { return port_; }
  // Health status of the server and of linserve.v1.LinServe.
  void SetServing(bool serving);
  bool serving() const;
  // Stops accepting calls and waits up to `deadline` for calls in flight, then cancels them.
  // Idempotent.
  void Shutdown(absl::Duration deadline);

 private:
  GrpcServer(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
             const GrpcServerOptions& options);

  ServiceEnv env_;
  LinServeService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> serving_{false};
  std::atomic<bool> shut_down_{false};
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_GRPC_SERVER_H_
