#include "server/transport/http_server.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

void Send(evhttp_request* req, int status, absl::string_view content_type, absl::string_view body) {
  evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                    std::string(content_type).c_str());
  evbuffer* buffer = evbuffer_new();
  evbuffer_add(buffer, body.data(), body.size());
  evhttp_send_reply(req, status, nullptr, buffer);
  evbuffer_free(buffer);
}

}  // namespace

HttpServer::HttpServer(const MetricsRegistry& metrics, std::function<bool()> ready)
    : metrics_(metrics), ready_(std::move(ready)) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              const MetricsRegistry& metrics,
                                                              std::function<bool()> ready) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port must be in [0, 65535], got ", options.port));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(metrics, std::move(ready)));
  absl::StatusOr<std::unique_ptr<HttpListener>> listener =
      HttpListener::Bind(options.host, options.port);
  if (!listener.ok()) return listener.status();
  server->listener_ = *std::move(listener);
  evhttp* http = server->listener_->http();
  evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
  evhttp_set_cb(http, "/metrics", &HttpServer::OnMetrics, server.get());
  evhttp_set_cb(http, "/healthz", &HttpServer::OnHealth, server.get());
  evhttp_set_cb(http, "/readyz", &HttpServer::OnReady, server.get());
  evhttp_set_gencb(http, &HttpServer::OnOther, server.get());
  server->port_ = server->listener_->port();
  server->listener_->Run();
  spdlog::info("HTTP: /metrics, /healthz, /readyz on port {}", server->port_);
  return server;
}

void HttpServer::OnMetrics(evhttp_request* req, void* arg) {
  const HttpServer& server = *static_cast<const HttpServer*>(arg);
  Send(req, 200, "text/plain; version=0.0.4; charset=utf-8", server.metrics_.RenderPrometheus());
}

void HttpServer::OnHealth(evhttp_request* req, void*) { Send(req, 200, "text/plain", "ok\n"); }

void HttpServer::OnReady(evhttp_request* req, void* arg) {
  if (static_cast<const HttpServer*>(arg)->ready_()) {
    Send(req, 200, "text/plain", "ready\n");
  } else {
    Send(req, 503, "text/plain", "not ready: shutting down\n");
  }
}

void HttpServer::OnOther(evhttp_request* req, void*) { Send(req, 404, "text/plain", ""); }

void HttpServer::Stop() {
  if (listener_ != nullptr) listener_->Stop();
}

}  // namespace linserve
