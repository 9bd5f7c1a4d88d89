// OpenAiServer: the OpenAI-compatible HTTP API on its own port (docs/openai.md):
// POST /v1/completions, POST /v1/chat/completions (streamed as server-sent events or whole),
// GET /v1/models[/{id}], and sessions: POST /v1/sessions, GET and DELETE /v1/sessions/{id}.
//
// Built on libevent's evhttp (HttpListener): one event-loop thread holds every connection (no thread per
// connection, so thousands of streams cost file descriptors and buffers only). The engine's
// callbacks never touch a connection: they queue the tokens on the request's exchange and wake
// the loop, which formats and writes them, so the engine thread never waits for a client. A
// client that disconnects cancels its job (Engine::Cancel: its slot is free within one step).
//
// Same engine, admission, limits and tenants as gRPC: requests go through Engine::Submit, and
// each request's caller and id are established as gRPC's are (RequestContext, with the
// Authenticator main.cc hands to both servers; Authorization: Bearer).
//
// Parsing a request body and tokenizing its prompt run on worker threads, never on the loop
// thread that serves every stream.
//
// Bounded before authentication: a connection's first request head is checked (its
// Authorization header) as it arrives, before evhttp reads the body; a refused request is
// answered by the server itself and closed, its body read and discarded, never buffered. A
// request must be complete (headers and body) within `request_deadline` of its first byte, and
// at most `max_connections` connections are open at once.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/transport/auth.h"
#include "server/transport/chat_template.h"

namespace linserve {

struct OpenAiServerOptions {
  // Interface to listen on. Default: "127.0.0.1".
  std::string host = "127.0.0.1";
  // Port; 0 picks a free one (see OpenAiServer::port()). Default: 8000.
  int port = 8000;
  // The model's id in /v1/models and the "model" every request must name. Default: "" (main.cc
  // uses the model directory's name).
  std::string model_id;
  // Applied to chat messages; nullopt refuses chat completions. Default: nullopt.
  std::optional<ChatTemplate> chat_template;
  // Seconds without a byte after which a connection reading a request, or idle before or
  // between requests, is closed. Streams are not limited by it. Default: 60.
  int idle_timeout_seconds = 60;
  // Most connections open at once, refused ones still discarding their body included; a
  // connection beyond it is answered 503 and closed. In [1, 1048576]. Default: 1024.
  int max_connections = 1024;
  // Time a request may take from its first byte until its headers and body are in; one still
  // incomplete then is closed. Also how long a refused request's body is read and discarded
  // before its connection closes. In [1 s, 1 h]. Default: 30 s.
  absl::Duration request_deadline = absl::Seconds(30);
};

class OpenAiServer {
 public:
  // Binds and starts the loop thread. `engine`, `auth` and `metrics` must outlive the server.
  static absl::StatusOr<std::unique_ptr<OpenAiServer>> Start(Engine& engine,
                                                             const Authenticator& auth,
                                                             MetricsRegistry& metrics,
                                                             OpenAiServerOptions options);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  int port() const;
  // Cancels the jobs of requests still open, stops listening and joins the loop thread.
  // Idempotent. Call after Engine::Shutdown to let requests finish first.
  void Stop();

  class Impl;

 private:
  explicit OpenAiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_H_
