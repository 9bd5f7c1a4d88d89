// HttpServer: the operator's HTTP endpoint on its own port (libevent's evhttp, like the OpenAI
// API, on its own loop thread): Prometheus metrics at /metrics, liveness at /healthz (200 while
// the process serves HTTP) and readiness at /readyz (200 while the server accepts work, 503
// once it drains). Any other path is 404.
#ifndef LINSERVE_SERVER_TRANSPORT_HTTP_SERVER_H_
#define LINSERVE_SERVER_TRANSPORT_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/metrics/metrics.h"
#include "server/transport/http_listener.h"

namespace linserve {

struct HttpServerOptions {
  // Interface to listen on. Default: "127.0.0.1".
  std::string host = "127.0.0.1";
  // Port; 0 picks a free one (see HttpServer::port()). Default: 9090.
  int port = 9090;
};

class HttpServer {
 public:
  // `metrics` must outlive the server; `ready` is called (from the loop thread) for /readyz.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           const MetricsRegistry& metrics,
                                                           std::function<bool()> ready);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops listening and joins the loop thread. Idempotent.
  void Stop();

 private:
  HttpServer(const MetricsRegistry& metrics, std::function<bool()> ready);

  static void OnMetrics(evhttp_request* req, void* arg);
  static void OnHealth(evhttp_request* req, void* arg);
  static void OnReady(evhttp_request* req, void* arg);
  static void OnOther(evhttp_request* req, void* arg);

  const MetricsRegistry& metrics_;
  const std::function<bool()> ready_;
  std::unique_ptr<HttpListener> listener_;
  int port_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_HTTP_SERVER_H_
