// The OpenAI API server's parts (openai_server.h), shared by its two files: openai_server.cc
// (routes, exchanges and their replies) and openai_connections.cc (connections before their
// requests reach a route: the first head's auth check, max_connections, deadlines, refusals).
// Everything here runs on the loop thread unless it says otherwise.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_IMPL_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_IMPL_H_

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/transport/chunked_body_meter.h"
#include "server/transport/http_listener.h"
#include "server/transport/loop_mailbox.h"
#include "server/transport/openai_error.h"
#include "server/transport/openai_request.h"
#include "server/transport/openai_response.h"
#include "server/transport/openai_server.h"
#include "server/transport/request_context.h"
#include "server/transport/work_pool.h"

namespace linserve {

// The most bytes of a request's head (request line, headers, blank line) the server reads.
inline constexpr int kMaxHeadersBytes = 64 << 10;
// How far evhttp's own head and body limits lie beyond the server's (OpenAiServer::Impl::Start).
inline constexpr int64_t kEvhttpSlackBytes = int64_t{4} << 20;

struct Connection;

// An HTTP request in progress. `req` is the loop thread's and is null once the reply is
// complete or the connection closed; the engine side (pending tokens, the finish) is guarded by
// `mu`.
struct Exchange {
  OpenAiServer::Impl* server = nullptr;
  Connection* connection = nullptr;  // the one `req` came on, while `req` is set
  evhttp_request* req = nullptr;
  std::string endpoint;  // the metrics label
  std::string request_id;
  std::vector<JobId> jobs;  // one per choice
  std::optional<OpenAiResponse> response;  // generations only
  bool stream = false;
  bool started = false;  // a streamed reply's status and headers are sent
  // Watches the connection for the client closing it while a generation runs (evhttp reads
  // nothing until the reply is complete, so it only notices when a write fails).
  event* watch = nullptr;

  // A choice's end, as its sink heard it.
  struct ChoiceEnd {
    int32_t choice = 0;
    absl::Status status;
    GenerationResult result;
  };
  absl::Mutex mu;
  // Tokens in the order the choices' sinks heard them, each with its choice.
  std::vector<std::pair<int32_t, EmittedToken>> pending ABSL_GUARDED_BY(mu);
  std::vector<ChoiceEnd> ended ABSL_GUARDED_BY(mu);
  bool flush_posted ABSL_GUARDED_BY(mu) = false;
};

// An accepted connection, from evhttp_set_bevcb until evhttp frees it (its close callback). Loop
// thread only.
struct Connection {
  enum class State {
    kHead,     // a request's head is being read and checked
    kReading,  // its head passed the checks; its body is being read
    kServing,  // evhttp handed the request over; its reply is not complete
    kIdle,     // between requests
    kRefused,  // answered by the server itself (`refusal`); closing
  };
  OpenAiServer::Impl* server = nullptr;
  bufferevent* bev = nullptr;
  // Null until adopted: evhttp creates it after evhttp_set_bevcb's callback returns.
  evhttp_connection* evcon = nullptr;
  evbuffer_cb_entry* input_watch = nullptr;
  event* task = nullptr;      // activated to adopt the connection, then to send `refusal`
  event* deadline = nullptr;  // the request's deadline
  State state = State::kHead;
  bool first = true;  // the connection's first request (its head is authenticated)
  std::string head;   // the request's head so far, while kHead
  // A chunked request body's meter, while kReading one.
  std::optional<ChunkedBodyMeter> chunked;
  int64_t body_left = 0;  // bytes of a Content-Length body still to arrive, while kReading
  // The client sent a request's bytes before the previous one was answered (pipelining): from
  // then on the connection's requests are left to evhttp's own checks.
  bool pipelined = false;
  std::string refusal;
  absl::string_view refused_for;  // the metric's reason
  bool linger = false;  // after `refusal`, read and discard what the client still sends
  bool admitted = false;  // within max_connections
  Exchange* exchange = nullptr;  // the request being served
};

// A refused connection reading and discarding what its client still sends (its request's
// body) until the client closes it or `until`, so that the client reads the answer rather than
// a reset. Loop thread only.
struct Linger {
  OpenAiServer::Impl* server = nullptr;
  int fd = -1;
  event* readable = nullptr;
  absl::Time until;
};

class OpenAiServer::Impl {
 public:
  Impl(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
       OpenAiServerOptions options);
  ~Impl() { Stop(); }

  // Binds the listener and starts the loop thread.
  absl::Status Start();
  int port() const { return port_; }
  // See OpenAiServer::Stop.
  void Stop();

 private:
  // One choice's sink.
  class Sink : public TokenSink {
   public:
    Sink(Impl* server, std::shared_ptr<Exchange> exchange, int32_t choice)
        : server_(server),
          mailbox_(server->mailbox_),
          exchange_(std::move(exchange)),
          choice_(choice) {}
    void OnToken(const GeneratedToken& token, std::string_view text) override {
      bool post = false;
      {
        absl::MutexLock lock(&exchange_->mu);
        exchange_->pending.emplace_back(choice_, EmittedToken{token, std::string(text)});
        post = !std::exchange(exchange_->flush_posted, true);
      }
      if (post) Post();
    }
    // An echoed prompt (completions' echo): its tokens come first, as completion tokens do.
    void OnPromptTokens(absl::Span<const PromptToken> tokens) override {
      bool post = false;
      {
        absl::MutexLock lock(&exchange_->mu);
        for (const PromptToken& t : tokens) {
          GeneratedToken token{.id = t.id,
                               .logprob = t.logprob.value_or(0.0f),
                               .top_logprobs = t.top_logprobs};
          exchange_->pending.emplace_back(
              choice_, EmittedToken{std::move(token), t.text, !t.logprob.has_value(),
                                    /*echoed=*/true});
        }
        post = !std::exchange(exchange_->flush_posted, true);
      }
      if (post) Post();
    }
    void OnFinish(const absl::Status& status, const GenerationResult& result) override {
      bool post = false;
      {
        absl::MutexLock lock(&exchange_->mu);
        exchange_->ended.push_back({choice_, status, result});
        post = !std::exchange(exchange_->flush_posted, true);
      }
      if (post) Post();
    }

   private:
    void Post() {
      // The server is alive while the mailbox is open (Stop closes it first).
      mailbox_->Post([server = server_, exchange = exchange_] { server->Flush(exchange); });
    }
    Impl* const server_;
    const std::shared_ptr<LoopMailbox> mailbox_;
    const std::shared_ptr<Exchange> exchange_;
    const int32_t choice_;
  };

  static void OnWake(evutil_socket_t, short, void* arg) {
    static_cast<Impl*>(arg)->mailbox_->Drain();
  }

  static void OnRequest(evhttp_request* req, void* arg) { static_cast<Impl*>(arg)->Route(req); }

  // evhttp accepted a connection: its bufferevent, whose input is watched from the first byte.
  static bufferevent* OnAccept(event_base* base, void* arg);
  // Loop thread, first thing after OnAccept: finds the connection evhttp made, refuses it beyond
  // max_connections; later, sends a refusal and closes.
  static void OnTask(evutil_socket_t, short, void* arg);
  // False if evhttp freed the connection already (then forgotten).
  bool Adopt(Connection& connection);
  // Bytes arrived on a connection, before evhttp reads them: starts the request's deadline,
  // checks each request's head (the first one's authentication; every one's size, and its
  // body's declared or chunked size) and refuses what evhttp would answer in HTML.
  static void OnInput(evbuffer* input, const evbuffer_cb_info* info, void* arg);
  // `checked`: how much of the head was there before (and ended no head); `rest`: bytes of
  // this read past what `head` took (the head's cap), from offset `rest_at` of `input`.
  void CheckHead(Connection& connection, size_t checked, evbuffer* input, size_t rest_at,
                 size_t rest);
  // Feeds a chunked body's bytes to its meter; refuses the request once over the limit or
  // malformed.
  void MeterBody(Connection& connection, absl::string_view bytes);
  static void OnDeadline(evutil_socket_t, short, void* arg);
  // Answers `connection` with `status` and `body` itself and closes it (after `linger`ing).
  void Refuse(Connection& connection, int status, const std::string& body, bool linger,
              absl::string_view reason);
  void StartLinger(int fd);
  static void OnLingerReadable(evutil_socket_t fd, short what, void* arg);
  void EndLinger(Linger& linger);
  // evhttp is freeing a connection: ends its exchange, if any, and forgets it.
  static void OnConnectionClose(evhttp_connection*, void* arg);
  void Forget(Connection& connection);
  Connection* ConnectionOf(evhttp_request* req);

  // The connection of an exchange closed before its reply was complete.
  void Closed(Exchange& exchange);
  // The connection of a running generation became readable: the client closed it (or sent
  // more, which is no sign of leaving: the watch then ends).
  static void OnReadable(evutil_socket_t fd, short, void* arg);
  void Watch(Exchange& exchange);
  static void Unwatch(Exchange& exchange);

  void Route(evhttp_request* req);
  void Generate(const std::shared_ptr<Exchange>& exchange, OpenAiEndpoint endpoint,
                const RequestContext& call);
  void Models(Exchange& exchange, absl::string_view id);
  void Sessions(const std::shared_ptr<Exchange>& exchange, evhttp_cmd_type method,
                absl::string_view id, const std::string& tenant);
  // Loop thread, with the body parsed on a worker: submits it (the engine validates it).
  void Submit(const std::shared_ptr<Exchange>& exchange, const RequestContext& call,
              absl::StatusOr<OpenAiRequest> request);
  void Flush(const std::shared_ptr<Exchange>& exchange);

  // Registers `exchange` as the one `req` replies to: its connection's close is watched.
  std::shared_ptr<Exchange> Open(evhttp_request* req, Connection& connection,
                                 std::string endpoint, std::string request_id);
  // Ends `exchange`'s reply (if its client is still there).
  void Reply(Exchange& exchange, int status, const std::string& body);
  void ReplyError(Exchange& exchange, const absl::Status& status);
  // The reply is complete: the connection is no longer watched for this exchange.
  void Done(Exchange& exchange, int status);
  void Count(absl::string_view endpoint, int status);
  void CountRefused(absl::string_view reason);

  Engine& engine_;
  const Authenticator& auth_;
  MetricsRegistry& metrics_;
  const OpenAiServerOptions options_;
  OpenAiContext context_;
  // A request body's limit: a prompt's text plus the rest of a request (messages' JSON, stop
  // strings), max_prompt_bytes + 1 MiB.
  int64_t max_body_bytes_ = 0;
  const int64_t created_;

  std::unique_ptr<HttpListener> listener_;
  event* wake_ = nullptr;
  std::shared_ptr<LoopMailbox> mailbox_;
  int port_ = 0;
  // Loop thread: exchanges whose connection is watched, by address.
  absl::flat_hash_map<Exchange*, std::shared_ptr<Exchange>> live_;
  // Loop thread: open connections by bufferevent (`admitted_` of them within
  // max_connections), and refused ones lingering (which count against it too).
  absl::flat_hash_map<bufferevent*, std::unique_ptr<Connection>> connections_;
  size_t admitted_ = 0;
  absl::flat_hash_map<Linger*, std::unique_ptr<Linger>> lingering_;
  WorkPool parsers_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_SERVER_IMPL_H_
