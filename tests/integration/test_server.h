// TestServer: the real server stack (CPU backend, engine, gRPC and HTTP servers) in-process on
// 127.0.0.1 port 0, plus a client connected to it.
#ifndef LINSERVE_TESTS_INTEGRATION_TEST_SERVER_H_
#define LINSERVE_TESTS_INTEGRATION_TEST_SERVER_H_

#include <memory>
#include <string>

#include "client/client.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/transport/auth.h"
#include "server/transport/grpc_server.h"
#include "server/transport/http_server.h"

namespace linserve {

struct TestServerOptions {
  EngineOptions engine;
  BackendOptions backend;
  GrpcServerOptions grpc;
  // Its certificate_principals follows grpc.tls_client_ca_file, as in main.cc.
  AuthOptions auth;
  // Client options other than the target.
  ClientOptions client;
  bool http = false;
};

class TestServer {
 public:
  // Aborts the test binary with a message when the stack cannot start. `model` must outlive
  // the server.
  TestServer(const Model& model, TestServerOptions options = {});
  ~TestServer();

  Client& client() { return *client_; }
  // A new client for this server with `options` (target filled in).
  std::unique_ptr<Client> NewClient(ClientOptions options) const;
  Engine& engine() { return *engine_; }
  GrpcServer& grpc() { return *grpc_; }
  MetricsRegistry& metrics() { return metrics_; }
  int port() const { return grpc_->port(); }
  int http_port() const { return http_->port(); }
  // Drains and stops the engine (persisting sessions when a state_dir is set), then the
  // servers. Idempotent.
  void Stop(absl::Duration drain = absl::Seconds(10));

 private:
  MetricsRegistry metrics_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<Client> client_;
  ClientOptions client_options_;
};

// Deterministic greedy-free request helpers.
v1::GenerateRequest TokensRequest(const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                  uint64_t seed, const std::string& session_id = "");

// Everything one Generate call delivered.
struct Streamed {
  absl::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  int messages = 0;
  v1::GenerateResponse last;
};
Streamed RunGenerate(Client& client, const v1::GenerateRequest& request,
                     const CallOptions& options = {});

}  // namespace linserve

#endif  // LINSERVE_TESTS_INTEGRATION_TEST_SERVER_H_
