#include "server/transport/grpc_server.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr char kServiceName[] = "linserve.v1.LinServe";

// Turns reflection on or off for one builder. Loading grpc++_reflection registers its plugin
// for every server of the process at static initialisation, so "off" must remove it and "on"
// must add it only where it is missing.
class ReflectionOption : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    std::erase_if(*plugins, [&](const auto& plugin) { return plugin->name() == name; });
    if (enabled_) {
      plugins->push_back(std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
    }
  }

 private:
  const bool enabled_;
};

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in || out.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read a PEM file at \"", path, "\""));
  }
  return out.str();
}

}  // namespace

GrpcServer::GrpcServer(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
                       const GrpcServerOptions& options)
    : env_(engine, auth, metrics, options.export_chunk_bytes),
      service_(env_) {}

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine,
                                                              const Authenticator& auth,
                                                              MetricsRegistry& metrics,
                                                              const GrpcServerOptions& options) {
  if (options.max_receive_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_receive_message_bytes must be >= 1, got ", options.max_receive_message_bytes));
  }
  if (options.export_chunk_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export_chunk_bytes must be >= 1, got ", options.export_chunk_bytes));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert and tls_key: give both (TLS) or neither (plaintext)");
  }
  if (!options.tls_client_ca_file.empty() && options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_ca: client certificates need TLS (tls_cert and tls_key)");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "tls_key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!options.tls_client_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPem(options.tls_client_ca_file, "tls_client_ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }

  std::unique_ptr<GrpcServer> server(new GrpcServer(engine, auth, metrics, options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &server->port_);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.SetOption(std::make_unique<ReflectionOption>(options.reflection));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve gRPC on \"", options.address,
        "\" (address in use, not an address, or a TLS key that does not match the "
        "certificate)"));
  }
  server->SetServing(true);
  spdlog::info("gRPC: serving {} on port {} ({}{}{})", kServiceName, server->port_,
               options.tls_cert_file.empty()          ? "plaintext"
               : options.tls_client_ca_file.empty() ? "TLS"
                                                    : "mutual TLS",
               auth.tokens_required()
                   ? absl::StrCat(", bearer tokens of ", auth.tenant_count(), " tenant(s)")
                   : std::string(),
               options.reflection ? ", reflection" : "");
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::SetServing(bool serving) {
  serving_ = serving;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

bool GrpcServer::serving() const { return serving_; }

void GrpcServer::Shutdown(absl::Duration deadline) {
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  serving_ = false;
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  server_->Wait();
}

}  // namespace linserve
