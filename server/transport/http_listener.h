// HttpListener: an evhttp server (libevent) bound to one host:port, with the thread that runs
// its event loop. The HTTP servers (the OpenAI API, the operator's metrics and probes) each own
// one: each its own port and loop, so a slow scrape never delays a token stream.
#ifndef LINSERVE_SERVER_TRANSPORT_HTTP_LISTENER_H_
#define LINSERVE_SERVER_TRANSPORT_HTTP_LISTENER_H_

#include <event2/event.h>
#include <event2/http.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace linserve {

class HttpListener {
 public:
  // Binds `host`:`port` (0 picks a free port) with a backlog large enough for a burst of
  // clients connecting at once. The loop does not run until Run. UNAVAILABLE when the address
  // cannot be bound, INVALID_ARGUMENT when `host` is not an address.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Bind(const std::string& host, int port);
  // Stops the loop, then frees evhttp (closing its connections) and the event base.
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  event_base* base() const { return base_; }
  // Set callbacks and limits before Run.
  evhttp* http() const { return http_; }
  int port() const { return port_; }

  // Starts the loop thread, with SIGPIPE blocked: a write to a client that left fails with
  // EPIPE rather than ending the process.
  void Run();
  // Stops the loop thread and frees evhttp: every connection's close callback runs, here.
  // Events of the base stay valid until the destructor. Idempotent.
  void Stop();

 private:
  HttpListener() = default;

  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  event* stop_ = nullptr;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_HTTP_LISTENER_H_
