#include "server/transport/http_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace linserve {

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                               const MetricsRegistry& metrics,
                                                               std::function<bool()> ready) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port must be in [0, 65535], got ", options.port));
  }
  std::unique_ptr<HttpServer> http(new HttpServer());
  httplib::Server& server = *http->server_;
  server.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics.RenderPrometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [ready = std::move(ready)](const httplib::Request&,
                                                   httplib::Response& response) {
    if (ready()) {
      response.set_content("ready\n", "text/plain");
    } else {
      response.status = 503;
      response.set_content("not ready: shutting down\n", "text/plain");
    }
  });
  http->port_ = options.port == 0 ? server.bind_to_any_port(options.host)
                                  : (server.bind_to_port(options.host, options.port)
                                         ? options.port
                                         : -1);
  if (http->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", options.host, ":",
                                               options.port, " (address in use?)"));
  }
  http->thread_ = std::thread([&server] { server.listen_after_bind(); });
  spdlog::info("HTTP: /metrics, /healthz, /readyz on port {}", http->port_);
  return http;
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace linserve
