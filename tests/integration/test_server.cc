#include "test_server.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "TestServer: %s: %s\n", what, value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

}  // namespace

TestServer::TestServer(const Model& model, TestServerOptions options)
    : client_options_(options.client) {
  std::unique_ptr<Backend> backend = OrDie(CreateCpuBackend(model, options.backend), "backend");
  engine_ = OrDie(Engine::Create(model, std::move(backend), options.engine, metrics_), "engine");
  options.grpc.address = "127.0.0.1:0";
  options.auth.certificate_principals = !options.grpc.tls_client_ca_file.empty();
  auth_ = OrDie(Authenticator::Create(options.auth), "authenticator");
  grpc_ = OrDie(GrpcServer::Start(*engine_, *auth_, metrics_, options.grpc), "gRPC server");
  if (options.http) {
    Engine* engine = engine_.get();
    GrpcServer* grpc = grpc_.get();
    http_ = OrDie(HttpServer::Start({.host = "127.0.0.1", .port = 0}, metrics_,
                                    [engine, grpc] { return grpc->serving() && !engine->draining(); }),
                  "HTTP server");
  }
  client_ = NewClient(client_options_);
}

TestServer::~TestServer() { Stop(); }

std::unique_ptr<Client> TestServer::NewClient(ClientOptions options) const {
  options.target = absl::StrCat(options.tls ? "localhost" : "127.0.0.1", ":", grpc_->port());
  return OrDie(Client::Create(options), "client");
}

void TestServer::Stop(absl::Duration drain) {
  if (engine_ == nullptr) return;
  grpc_->SetServing(false);
  if (absl::Status s = engine_->Shutdown(drain); !s.ok()) {
    std::fprintf(stderr, "TestServer: engine shutdown: %s\n", s.ToString().c_str());
  }
  grpc_->Shutdown(absl::Seconds(5));
  if (http_ != nullptr) http_->Stop();
  client_.reset();
  http_.reset();
  grpc_.reset();
  engine_.reset();
}

v1::GenerateRequest TokensRequest(const std::vector<int32_t>& prompt, int32_t max_new_tokens,
                                  uint64_t seed, const std::string& session_id) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.set_max_new_tokens(max_new_tokens);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_sampling()->set_temperature(0.8f);
  r.set_ignore_eos(true);
  r.set_session_id(session_id);
  return r;
}

Streamed RunGenerate(Client& client, const v1::GenerateRequest& request,
                     const CallOptions& options) {
  Streamed out;
  out.status = client.Generate(
      request,
      [&out](const v1::GenerateResponse& message) {
        ++out.messages;
        for (const v1::GeneratedToken& t : message.tokens()) out.tokens.push_back(t.id());
        out.text += message.text();
        out.last = message;
        return true;
      },
      options);
  return out;
}

}  // namespace linserve
