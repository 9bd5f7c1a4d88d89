#include "server/transport/openai_server.h"

#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/sessions/session_id.h"
#include "server/transport/openai_request.h"
#include "server/transport/openai_response.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

using nlohmann::json;

// Pending connections the kernel may hold before the loop accepts them: a burst of clients
// connecting at once is queued, not refused.
constexpr int kListenBacklog = 4096;
// Threads that parse request bodies and tokenize their prompts.
constexpr int kParseThreads = 2;
// evhttp's limit on a request's headers.
constexpr int kMaxHeadersBytes = 64 << 10;
// Most of a connection's first request head the server copies to check it (the headers, their
// request line and a read's worth more); a head not complete within it is refused.
constexpr size_t kMaxHeadBytes = kMaxHeadersBytes + (16 << 10);

// Threads running closures posted from the loop. Stop drops what has not started.
class WorkPool {
 public:
  explicit WorkPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~WorkPool() { Stop(); }
  void Post(absl::AnyInvocable<void() &&> fn) {
    absl::MutexLock lock(&mu_);
    if (!stopped_) queue_.push_back(std::move(fn));
  }
  void Stop() {
    std::deque<absl::AnyInvocable<void() &&>> dropped;
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
      dropped.swap(queue_);
    }
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Run() {
    while (true) {
      absl::AnyInvocable<void() &&> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](WorkPool* pool) ABSL_SHARED_LOCKS_REQUIRED(pool->mu_) {
              return pool->stopped_ || !pool->queue_.empty();
            },
            this));
        if (stopped_) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      std::move(fn)();
    }
  }

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Closures for the loop thread, posted from any thread. Once closed, posts are dropped (the
// loop is gone); the engine's callbacks may still arrive then.
class Mailbox {
 public:
  explicit Mailbox(event* wake) : wake_(wake) {}
  void Post(absl::AnyInvocable<void() &&> fn) {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    const bool wake = queue_.empty();
    queue_.push_back(std::move(fn));
    if (wake) event_active(wake_, EV_READ, 0);
  }
  // Loop thread: runs everything posted so far.
  void Drain() {
    std::vector<absl::AnyInvocable<void() &&>> batch;
    {
      absl::MutexLock lock(&mu_);
      batch.swap(queue_);
    }
    for (auto& fn : batch) std::move(fn)();
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    queue_.clear();
  }

 private:
  event* const wake_;
  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

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
  std::optional<JobId> job;
  std::optional<OpenAiResponse> response;  // generations only
  bool stream = false;
  bool started = false;  // a streamed reply's status and headers are sent
  // Watches the connection for the client closing it while a generation runs (evhttp reads
  // nothing until the reply is complete, so it only notices when a write fails).
  event* watch = nullptr;

  absl::Mutex mu;
  std::vector<EmittedToken> pending ABSL_GUARDED_BY(mu);
  std::optional<std::pair<absl::Status, GenerationResult>> finish ABSL_GUARDED_BY(mu);
  bool flush_posted ABSL_GUARDED_BY(mu) = false;
};

// An accepted connection, from evhttp_set_bevcb until evhttp frees it (its close callback). Loop
// thread only.
struct Connection {
  enum class State {
    kFirstHead,  // the head of the connection's first request is being read and checked
    kReading,    // a request is being read (the first one's head passed the check)
    kServing,    // evhttp handed the request over; its reply is not complete
    kIdle,       // between requests
    kRefused,    // answered by the server itself (`refusal`); closing
  };
  OpenAiServer::Impl* server = nullptr;
  bufferevent* bev = nullptr;
  // Null until adopted: evhttp creates it after evhttp_set_bevcb's callback returns.
  evhttp_connection* evcon = nullptr;
  evbuffer_cb_entry* input_watch = nullptr;
  event* task = nullptr;      // activated to adopt the connection, then to send `refusal`
  event* deadline = nullptr;  // the request's deadline
  State state = State::kFirstHead;
  std::string head;  // the first request's head so far, while kFirstHead
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

// Offset just past the blank line ending an HTTP head in `head`, looking at lines ending from
// `from` on; npos if the head is not complete. Lines end in "\n" or "\r\n", as evhttp reads them.
size_t HeadEnd(absl::string_view head, size_t from) {
  for (size_t i = std::max<size_t>(from, 1); i < head.size(); ++i) {
    if (head[i] != '\n') continue;
    if (head[i - 1] == '\n' || (i >= 2 && head[i - 1] == '\r' && head[i - 2] == '\n')) {
      return i + 1;
    }
  }
  return absl::string_view::npos;
}

// The first Authorization header of a complete head (request line, header lines, blank line).
std::optional<std::string> AuthorizationIn(absl::string_view head) {
  bool request_line = true;
  for (absl::string_view line : absl::StrSplit(head, '\n')) {
    if (std::exchange(request_line, false)) continue;
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos &&
        absl::EqualsIgnoreCase(line.substr(0, colon), "Authorization")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return std::nullopt;
}

// An answer the server writes on a connection itself, evhttp aside.
std::string RawReply(int status, absl::string_view body) {
  const absl::string_view reason = status == 401   ? "Unauthorized"
                                   : status == 403 ? "Forbidden"
                                   : status == 503 ? "Service Unavailable"
                                                   : "Bad Request";
  return absl::StrCat("HTTP/1.1 ", status, " ", reason,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

std::string RequestIdFor(evhttp_request* req) {
  const char* given = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-Id");
  if (given != nullptr) {
    const absl::string_view id(given);
    bool printable = !id.empty() && id.size() <= 64;
    for (char c : id) printable = printable && c > ' ' && c < 127;
    if (printable) return std::string(id);
  }
  absl::StatusOr<std::string> random = RandomHex(12);
  return random.ok() ? *random : "unnamed";
}

json SessionJson(const SessionInfo& info) {
  return {{"id", info.id.value},
          {"object", "session"},
          {"num_tokens", info.num_tokens},
          {"resident", info.resident},
          {"busy", info.busy},
          {"created", absl::ToUnixSeconds(info.create_time)},
          {"last_used", absl::ToUnixSeconds(info.last_use_time)}};
}

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
       OpenAiServerOptions options)
      : engine_(engine),
        auth_(auth),
        metrics_(metrics),
        options_(std::move(options)),
        created_(absl::ToUnixSeconds(absl::Now())),
        parsers_(kParseThreads) {
    context_.model_id = options_.model_id;
    context_.tokenizer = engine_.model().tokenizer.get();
    context_.limits = engine_.options().requests;
    context_.chat_template = options_.chat_template ? &*options_.chat_template : nullptr;
  }

  ~Impl() { Stop(); }

  absl::Status Bind() {
    static const int threads = evthread_use_pthreads();
    if (threads != 0) return absl::InternalError("libevent: evthread_use_pthreads failed");
    base_ = event_base_new();
    if (base_ == nullptr) return absl::InternalError("libevent: event_base_new failed");
    wake_ = event_new(base_, -1, 0, &Impl::OnWake, this);
    mailbox_ = std::make_shared<Mailbox>(wake_);
    http_ = evhttp_new(base_);
    evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE);
    // A prompt's text plus the rest of a request (messages' JSON, stop strings).
    evhttp_set_max_body_size(http_, context_.limits.max_prompt_bytes + (int64_t{1} << 20));
    evhttp_set_max_headers_size(http_, kMaxHeadersBytes);
    evhttp_set_timeout(http_, options_.idle_timeout_seconds);
    evhttp_set_gencb(http_, &Impl::OnRequest, this);
    evhttp_set_bevcb(http_, &Impl::OnAccept, this);

    sockaddr_storage address{};
    int length = sizeof(address);
    const std::string host_port = absl::StrCat(options_.host, ":", options_.port);
    // The host alone (libevent refuses port 0 in "host:port"); the port is set below.
    if (evutil_parse_sockaddr_port(options_.host.c_str(), reinterpret_cast<sockaddr*>(&address),
                                   &length) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot parse the host ", options_.host));
    }
    if (address.ss_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(options_.port);
    } else {
      reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(options_.port);
    }
    evconnlistener* listener = evconnlistener_new_bind(
        base_, nullptr, nullptr, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
        kListenBacklog, reinterpret_cast<sockaddr*>(&address), length);
    if (listener == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve HTTP on ", host_port, " (address in use?)"));
    }
    evhttp_bind_listener(http_, listener);
    sockaddr_storage bound{};
    socklen_t bound_length = sizeof(bound);
    getsockname(evconnlistener_get_fd(listener), reinterpret_cast<sockaddr*>(&bound),
                &bound_length);
    port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    thread_ = std::thread([this] { event_base_dispatch(base_); });
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void Stop() {
    if (mailbox_ != nullptr) mailbox_->Close();
    parsers_.Stop();
    if (thread_.joinable()) {
      event_base_loopbreak(base_);
      thread_.join();
    }
    // Open requests' jobs are cancelled as their connections close (OnConnectionClose).
    if (http_ != nullptr) evhttp_free(http_);
    http_ = nullptr;
    live_.clear();
    // Connections evhttp freed before they were adopted, and refused ones still lingering.
    while (!connections_.empty()) Forget(*connections_.begin()->second);
    while (!lingering_.empty()) EndLinger(*lingering_.begin()->second);
    if (wake_ != nullptr) event_free(wake_);
    wake_ = nullptr;
    if (base_ != nullptr) event_base_free(base_);
    base_ = nullptr;
  }

 private:
  class Sink : public TokenSink {
   public:
    Sink(Impl* server, std::shared_ptr<Exchange> exchange)
        : server_(server), mailbox_(server->mailbox_), exchange_(std::move(exchange)) {}
    void OnToken(const GeneratedToken& token, std::string_view text) override {
      bool post = false;
      {
        absl::MutexLock lock(&exchange_->mu);
        exchange_->pending.push_back(EmittedToken{token, std::string(text)});
        post = !std::exchange(exchange_->flush_posted, true);
      }
      if (post) Post();
    }
    void OnFinish(const absl::Status& status, const GenerationResult& result) override {
      bool post = false;
      {
        absl::MutexLock lock(&exchange_->mu);
        exchange_->finish.emplace(status, result);
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
    const std::shared_ptr<Mailbox> mailbox_;
    const std::shared_ptr<Exchange> exchange_;
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
  // Bytes arrived on a connection, before evhttp reads them: starts the request's deadline and
  // checks the first request's head.
  static void OnInput(evbuffer* input, const evbuffer_cb_info* info, void* arg);
  // `checked`: how much of the head was there before (and ended no head).
  void CheckFirstHead(Connection& connection, size_t checked);
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
                const std::string& tenant);
  void Models(Exchange& exchange, absl::string_view id);
  void Sessions(const std::shared_ptr<Exchange>& exchange, evhttp_cmd_type method,
                absl::string_view id, const std::string& tenant);
  // Loop thread, with the body parsed on a worker: validates and submits it.
  void Submit(const std::shared_ptr<Exchange>& exchange, const std::string& tenant,
              absl::StatusOr<OpenAiRequest> request);
  void Flush(const std::shared_ptr<Exchange>& exchange);

  // Registers `exchange` as the one `req` replies to: its connection's close is watched.
  std::shared_ptr<Exchange> Open(evhttp_request* req, Connection& connection,
                                 std::string endpoint);
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
  const int64_t created_;

  event_base* base_ = nullptr;
  event* wake_ = nullptr;
  evhttp* http_ = nullptr;
  std::shared_ptr<Mailbox> mailbox_;
  std::thread thread_;
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

void OpenAiServer::Impl::Count(absl::string_view endpoint, int status) {
  metrics_
      .GetCounter("linserve_http_requests_total",
                  "Finished OpenAI API requests by endpoint and HTTP status (499: the client "
                  "closed the connection first)",
                  {{"endpoint", std::string(endpoint)}, {"code", absl::StrCat(status)}})
      .Increment();
}

bufferevent* OpenAiServer::Impl::OnAccept(event_base* base, void* arg) {
  Impl& server = *static_cast<Impl*>(arg);
  // As evhttp's own: a socket bufferevent, whose fd evhttp sets and closes.
  bufferevent* bev = bufferevent_socket_new(base, -1, 0);
  if (bev == nullptr) return nullptr;
  // Held until adopted: evhttp frees it at once if it cannot set the connection up.
  bufferevent_incref(bev);
  auto connection = std::make_unique<Connection>();
  connection->server = &server;
  connection->bev = bev;
  connection->input_watch =
      evbuffer_add_cb(bufferevent_get_input(bev), &Impl::OnInput, connection.get());
  connection->task = event_new(base, -1, 0, &Impl::OnTask, connection.get());
  connection->deadline = evtimer_new(base, &Impl::OnDeadline, connection.get());
  // Runs once evhttp has made the connection, before the loop polls its socket.
  event_active(connection->task, EV_TIMEOUT, 0);
  server.connections_.emplace(bev, std::move(connection));
  return bev;
}

void OpenAiServer::Impl::OnTask(evutil_socket_t, short, void* arg) {
  Connection& connection = *static_cast<Connection*>(arg);
  Impl& server = *connection.server;
  if (connection.evcon == nullptr && !server.Adopt(connection)) return;
  // evhttp may have taken the request, read whole with the head: it answers it then.
  if (connection.state != Connection::State::kRefused) return;
  server.CountRefused(connection.refused_for);
  const int fd = bufferevent_getfd(connection.bev);
  // A few hundred bytes into a socket buffer that holds nothing of ours: it takes them whole.
  send(fd, connection.refusal.data(), connection.refusal.size(), MSG_NOSIGNAL);
  if (connection.linger) {
    // A copy of the socket outlives evhttp's, which closes it (after shutting down our side: the
    // client reads the answer, then the end).
    const int kept = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (kept >= 0) server.StartLinger(kept);
  }
  evhttp_connection_free(connection.evcon);  // calls OnConnectionClose: `connection` is gone
}

bool OpenAiServer::Impl::Adopt(Connection& connection) {
  bufferevent_data_cb read = nullptr;
  void* evcon = nullptr;
  bufferevent_getcb(connection.bev, &read, nullptr, nullptr, &evcon);
  bufferevent_decref(connection.bev);
  if (read == nullptr) {
    // evhttp freed the bufferevent (its input and our watch with it) setting the connection up.
    connection.input_watch = nullptr;
    Forget(connection);
    return false;
  }
  connection.evcon = static_cast<evhttp_connection*>(evcon);
  evhttp_connection_set_closecb(connection.evcon, &Impl::OnConnectionClose, &connection);
  if (admitted_ + lingering_.size() < static_cast<size_t>(options_.max_connections)) {
    connection.admitted = true;
    ++admitted_;
  } else {
    ApiError error = ToApiError(absl::UnavailableError(absl::StrCat(
        "the server has its most connections open (", options_.max_connections,
        ", --http_max_connections); retry later")));
    Refuse(connection, 503, ApiErrorJson(error), /*linger=*/false, "connections");
  }
  return true;
}

void OpenAiServer::Impl::OnInput(evbuffer* input, const evbuffer_cb_info* info, void* arg) {
  if (info->n_added == 0) return;
  Connection& connection = *static_cast<Connection*>(arg);
  Impl& server = *connection.server;
  switch (connection.state) {
    case Connection::State::kIdle:
      connection.state = Connection::State::kReading;
      break;
    case Connection::State::kFirstHead:
      break;
    default:
      return;
  }
  if (!evtimer_pending(connection.deadline, nullptr)) {
    const timeval deadline = absl::ToTimeval(server.options_.request_deadline);
    evtimer_add(connection.deadline, &deadline);
  }
  if (connection.state != Connection::State::kFirstHead) return;
  // The bytes just read are the input's last; evhttp has not seen them yet.
  std::string& head = connection.head;
  const size_t before = head.size();
  const size_t take = std::min(info->n_added, kMaxHeadBytes - before);
  evbuffer_ptr from;
  evbuffer_ptr_set(input, &from, evbuffer_get_length(input) - info->n_added, EVBUFFER_PTR_SET);
  head.resize(before + take);
  evbuffer_copyout_from(input, &from, head.data() + before, take);
  server.CheckFirstHead(connection, before);
}

void OpenAiServer::Impl::CheckFirstHead(Connection& connection, size_t checked) {
  // A blank line ends at a newline among the new bytes (one before would have ended it before).
  const size_t end = HeadEnd(connection.head, checked);
  if (end == absl::string_view::npos) {
    if (connection.head.size() == kMaxHeadBytes) {
      Refuse(connection, 400,
             ApiErrorJson(ToApiError(absl::InvalidArgumentError(absl::StrCat(
                 "headers: the request's headers exceed ", kMaxHeadersBytes, " bytes")))),
             /*linger=*/true, "headers");
    }
    return;
  }
  absl::StatusOr<std::string> tenant =
      auth_.AuthenticateHttp(AuthorizationIn(absl::string_view(connection.head).substr(0, end)));
  std::string().swap(connection.head);
  if (tenant.ok()) {
    connection.state = Connection::State::kReading;
    return;
  }
  const ApiError error = ToApiError(tenant.status());
  Refuse(connection, error.http_status, ApiErrorJson(error), /*linger=*/true, "unauthenticated");
}

void OpenAiServer::Impl::OnDeadline(evutil_socket_t, short, void* arg) {
  Connection& connection = *static_cast<Connection*>(arg);
  if (connection.state != Connection::State::kFirstHead &&
      connection.state != Connection::State::kReading) {
    return;
  }
  connection.server->CountRefused("deadline");
  evhttp_connection_free(connection.evcon);  // calls OnConnectionClose: `connection` is gone
}

void OpenAiServer::Impl::Refuse(Connection& connection, int status, const std::string& body,
                                bool linger, absl::string_view reason) {
  connection.refused_for = reason;
  connection.state = Connection::State::kRefused;
  connection.linger = linger;
  connection.refusal = RawReply(status, body);
  // Not here, in the middle of a read: evhttp reads what was read, then the task closes.
  event_active(connection.task, EV_TIMEOUT, 0);
}

void OpenAiServer::Impl::StartLinger(int fd) {
  auto linger = std::make_unique<Linger>();
  linger->server = this;
  linger->fd = fd;
  linger->until = absl::Now() + options_.request_deadline;
  linger->readable = event_new(base_, fd, EV_READ, &Impl::OnLingerReadable, linger.get());
  const timeval wait = absl::ToTimeval(options_.request_deadline);
  event_add(linger->readable, &wait);
  lingering_.emplace(linger.get(), std::move(linger));
}

void OpenAiServer::Impl::OnLingerReadable(evutil_socket_t fd, short what, void* arg) {
  Linger& linger = *static_cast<Linger*>(arg);
  if (what & EV_READ) {
    char discarded[16 << 10];
    const ssize_t n = recv(fd, discarded, sizeof(discarded), 0);
    const absl::Duration left = linger.until - absl::Now();
    if ((n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) &&
        left > absl::ZeroDuration()) {
      const timeval wait = absl::ToTimeval(left);
      event_add(linger.readable, &wait);
      return;
    }
  }
  linger.server->EndLinger(linger);
}

void OpenAiServer::Impl::EndLinger(Linger& linger) {
  event_free(linger.readable);
  close(linger.fd);
  lingering_.erase(&linger);  // destroys `linger`
}

void OpenAiServer::Impl::OnConnectionClose(evhttp_connection*, void* arg) {
  Connection& connection = *static_cast<Connection*>(arg);
  Impl& server = *connection.server;
  if (Exchange* exchange = std::exchange(connection.exchange, nullptr); exchange != nullptr) {
    server.Closed(*exchange);
  }
  server.Forget(connection);
}

void OpenAiServer::Impl::Forget(Connection& connection) {
  if (connection.input_watch != nullptr) {
    evbuffer_remove_cb_entry(bufferevent_get_input(connection.bev), connection.input_watch);
  }
  // Not adopted (the server stops): evhttp freed the bufferevent but for our reference.
  if (connection.evcon == nullptr && connection.input_watch != nullptr) {
    bufferevent_decref(connection.bev);
  }
  if (connection.admitted) --admitted_;
  event_free(connection.task);
  event_free(connection.deadline);
  connections_.erase(connection.bev);  // destroys `connection`
}

Connection* OpenAiServer::Impl::ConnectionOf(evhttp_request* req) {
  auto it = connections_.find(
      evhttp_connection_get_bufferevent(evhttp_request_get_connection(req)));
  return it == connections_.end() ? nullptr : it->second.get();
}

void OpenAiServer::Impl::CountRefused(absl::string_view reason) {
  metrics_
      .GetCounter("linserve_http_connections_refused_total",
                  "OpenAI API connections closed before their request reached a handler, by "
                  "reason: connections (--http_max_connections), unauthenticated, headers (a first "
                  "head reaching 80 KiB without its end), deadline (--http_request_deadline)",
                  {{"reason", std::string(reason)}})
      .Increment();
}

std::shared_ptr<Exchange> OpenAiServer::Impl::Open(evhttp_request* req, Connection& connection,
                                                   std::string endpoint) {
  auto exchange = std::make_shared<Exchange>();
  exchange->server = this;
  exchange->connection = &connection;
  exchange->req = req;
  exchange->endpoint = std::move(endpoint);
  exchange->request_id = RequestIdFor(req);
  // Tokens are small writes that must leave at once, not wait for the last one's ACK.
  const int no_delay = 1;
  setsockopt(
      bufferevent_getfd(evhttp_connection_get_bufferevent(evhttp_request_get_connection(req))),
      IPPROTO_TCP, TCP_NODELAY, &no_delay, sizeof(no_delay));
  connection.exchange = exchange.get();
  live_[exchange.get()] = exchange;
  return exchange;
}

void OpenAiServer::Impl::Watch(Exchange& exchange) {
  bufferevent* connection =
      evhttp_connection_get_bufferevent(evhttp_request_get_connection(exchange.req));
  exchange.watch = event_new(base_, bufferevent_getfd(connection), EV_READ | EV_PERSIST,
                             &Impl::OnReadable, &exchange);
  event_add(exchange.watch, nullptr);
}

void OpenAiServer::Impl::Unwatch(Exchange& exchange) {
  if (exchange.watch == nullptr) return;
  event_free(exchange.watch);
  exchange.watch = nullptr;
}

void OpenAiServer::Impl::OnReadable(evutil_socket_t fd, short, void* arg) {
  Exchange& exchange = *static_cast<Exchange*>(arg);
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  Unwatch(exchange);
  // End of stream or a reset: the client is gone. Freeing the connection calls OnClose.
  if (n <= 0) evhttp_connection_free(evhttp_request_get_connection(exchange.req));
}

void OpenAiServer::Impl::Closed(Exchange& exchange) {
  Unwatch(exchange);
  // When libevent finds the connection failed (a write to a client that left), it detaches the
  // unfinished request from it before freeing it: the request is then ours to free. A request
  // still on the connection (we freed the connection ourselves) is freed with it.
  if (evhttp_request_get_connection(exchange.req) == nullptr) evhttp_request_free(exchange.req);
  exchange.req = nullptr;
  Count(exchange.endpoint, 499);
  if (exchange.job.has_value()) engine_.Cancel(*exchange.job);
  live_.erase(&exchange);  // may destroy `exchange`
}

void OpenAiServer::Impl::Done(Exchange& exchange, int status) {
  Unwatch(exchange);
  exchange.connection->exchange = nullptr;
  exchange.connection->state = Connection::State::kIdle;
  exchange.req = nullptr;
  Count(exchange.endpoint, status);
}

void OpenAiServer::Impl::Reply(Exchange& exchange, int status, const std::string& body) {
  if (exchange.req == nullptr) return;
  evhttp_request* req = exchange.req;
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", "application/json");
  evhttp_add_header(headers, "X-Request-Id", exchange.request_id.c_str());
  evbuffer* buffer = evbuffer_new();
  evbuffer_add(buffer, body.data(), body.size());
  Done(exchange, status);
  evhttp_send_reply(req, status, nullptr, buffer);
  evbuffer_free(buffer);
  live_.erase(&exchange);  // may destroy `exchange`
}

void OpenAiServer::Impl::ReplyError(Exchange& exchange, const absl::Status& status) {
  const ApiError error = ToApiError(status);
  Reply(exchange, error.http_status, ApiErrorJson(error));
}

void OpenAiServer::Impl::Route(evhttp_request* req) {
  const evhttp_cmd_type method = evhttp_request_get_command(req);
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
  const char* raw_path = uri == nullptr ? nullptr : evhttp_uri_get_path(uri);
  absl::string_view path = raw_path == nullptr ? "" : raw_path;

  std::string endpoint = "other";
  enum class Route { kNone, kCompletions, kChat, kModels, kSessions } route = Route::kNone;
  absl::string_view id;
  if (path == "/v1/completions") {
    route = Route::kCompletions;
    endpoint = "completions";
  } else if (path == "/v1/chat/completions") {
    route = Route::kChat;
    endpoint = "chat_completions";
  } else if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) {
    route = Route::kModels;
    endpoint = "models";
    id = path.substr(std::min(path.size(), sizeof("/v1/models")));
  } else if (path == "/v1/sessions" || absl::StartsWith(path, "/v1/sessions/")) {
    route = Route::kSessions;
    endpoint = "sessions";
    id = path.substr(std::min(path.size(), sizeof("/v1/sessions")));
  }
  Connection* connection = ConnectionOf(req);
  if (connection == nullptr) {  // one evhttp_set_bevcb's callback could not allocate
    evhttp_send_error(req, 503, nullptr);
    return;
  }
  evtimer_del(connection->deadline);
  connection->state = Connection::State::kServing;
  std::shared_ptr<Exchange> exchange = Open(req, *connection, endpoint);
  // Every route, the unknown ones included, answers only an authenticated caller; one that is
  // not is answered and the connection closed (its next request would not be checked before
  // its body).
  const char* authorization =
      evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
  absl::StatusOr<std::string> tenant = auth_.AuthenticateHttp(
      authorization == nullptr ? std::nullopt : std::optional<absl::string_view>(authorization));
  if (!tenant.ok()) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    ReplyError(*exchange, tenant.status());
    return;
  }
  if (route == Route::kNone) {
    ReplyError(*exchange, absl::NotFoundError(absl::StrCat(
                              "no route for ", path,
                              ": this server serves /v1/completions, /v1/chat/completions, "
                              "/v1/models and /v1/sessions")));
    return;
  }
  const bool post = method == EVHTTP_REQ_POST;
  const bool allowed = route == Route::kModels     ? method == EVHTTP_REQ_GET
                       : route == Route::kSessions ? (id.empty() ? post : !post)
                                                   : post;
  if (!allowed) {
    ApiError error =
        ToApiError(absl::InvalidArgumentError(absl::StrCat("method: not allowed on ", path)));
    error.http_status = 405;
    Reply(*exchange, 405, ApiErrorJson(error));
    return;
  }
  switch (route) {
    case Route::kCompletions:
      Generate(exchange, OpenAiEndpoint::kCompletions, *tenant);
      break;
    case Route::kChat:
      Generate(exchange, OpenAiEndpoint::kChatCompletions, *tenant);
      break;
    case Route::kModels:
      Models(*exchange, id);
      break;
    case Route::kSessions:
      Sessions(exchange, method, id, *tenant);
      break;
    case Route::kNone:
      break;
  }
}

void OpenAiServer::Impl::Models(Exchange& exchange, absl::string_view id) {
  const json model = {{"id", options_.model_id},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "linserve"}};
  if (id.empty()) {
    Reply(exchange, 200, json{{"object", "list"}, {"data", json::array({model})}}.dump());
  } else if (id == options_.model_id) {
    Reply(exchange, 200, model.dump());
  } else {
    ReplyError(exchange, absl::NotFoundError(absl::StrCat(
                             "model: the model \"", id, "\" does not exist; this server serves \"",
                             options_.model_id, "\"")));
  }
}

void OpenAiServer::Impl::Sessions(const std::shared_ptr<Exchange>& exchange, evhttp_cmd_type method,
                                  absl::string_view id, const std::string& tenant) {
  // The engine answers on its thread: the reply is posted to the loop.
  auto reply = [this, exchange, mailbox = mailbox_](absl::StatusOr<json> body) {
    mailbox->Post([this, exchange, body = std::move(body)] {
      if (body.ok()) {
        Reply(*exchange, 200, body->dump(-1, ' ', false, json::error_handler_t::replace));
      } else {
        ReplyError(*exchange, body.status());
      }
    });
  };
  auto info = [reply](absl::StatusOr<SessionInfo> session) mutable {
    reply(session.ok() ? absl::StatusOr<json>(SessionJson(*session))
                       : absl::StatusOr<json>(session.status()));
  };
  if (id.empty()) {
    engine_.CreateSession(tenant, std::move(info));
    return;
  }
  absl::StatusOr<SessionId> session = ParseSessionId(id, "session_id");
  if (!session.ok()) {
    ReplyError(*exchange, session.status());
    return;
  }
  if (method == EVHTTP_REQ_GET) {
    engine_.GetSession(tenant, *session, std::move(info));
    return;
  }
  engine_.DeleteSession(
      tenant, *session, [reply, id = session->value](absl::Status status) mutable {
        reply(status.ok()
                  ? absl::StatusOr<json>(json{{"id", id}, {"object", "session"}, {"deleted", true}})
                  : absl::StatusOr<json>(status));
      });
}

void OpenAiServer::Impl::Generate(const std::shared_ptr<Exchange>& exchange,
                                  OpenAiEndpoint endpoint, const std::string& tenant) {
  evbuffer* input = evhttp_request_get_input_buffer(exchange->req);
  std::string body(evbuffer_get_length(input), '\0');
  evbuffer_remove(input, body.data(), body.size());
  // A client that leaves while its body is parsed is noticed (and its exchange ends) meanwhile.
  Watch(*exchange);
  // Parsing and tokenizing a large prompt takes a while: not on the loop, which serves every
  // stream.
  parsers_.Post([this, exchange, endpoint, tenant, body = std::move(body)] {
    absl::StatusOr<OpenAiRequest> request =
        ParseOpenAiRequest(endpoint, body, context_, exchange->request_id);
    mailbox_->Post([this, exchange, tenant, request = std::move(request)]() mutable {
      Submit(exchange, tenant, std::move(request));
    });
  });
}

void OpenAiServer::Impl::Submit(const std::shared_ptr<Exchange>& exchange,
                                const std::string& tenant, absl::StatusOr<OpenAiRequest> request) {
  if (exchange->req == nullptr) return;  // the client left
  if (!request.ok()) {
    ReplyError(*exchange, request.status());
    return;
  }
  request->generate.tenant = tenant;
  // The engine checks again; checking here names the OpenAI field in the error.
  if (absl::Status valid =
          ValidateGenerateRequest(request->generate, context_.limits, engine_.model().config);
      !valid.ok()) {
    ReplyError(*exchange, RenameEngineError(valid, *request));
    return;
  }
  const OpenAiEndpoint endpoint = request->endpoint;
  exchange->stream = request->stream;
  exchange->response.emplace(
      *request,
      absl::StrCat(endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                   exchange->request_id),
      absl::ToUnixSeconds(absl::Now()), options_.model_id, *context_.tokenizer);
  OpenAiRequest& parsed = *request;
  absl::StatusOr<JobId> job =
      engine_.Submit(std::move(parsed.generate), std::make_shared<Sink>(this, exchange));
  if (!job.ok()) {
    ReplyError(*exchange, RenameEngineError(job.status(), *request));
    return;
  }
  exchange->job = *job;
}

void OpenAiServer::Impl::Flush(const std::shared_ptr<Exchange>& exchange) {
  std::vector<EmittedToken> tokens;
  std::optional<std::pair<absl::Status, GenerationResult>> finish;
  {
    absl::MutexLock lock(&exchange->mu);
    tokens.swap(exchange->pending);
    finish = std::move(exchange->finish);
    exchange->finish.reset();
    exchange->flush_posted = false;
  }
  if (exchange->req == nullptr) return;  // the client left
  OpenAiResponse& response = *exchange->response;
  // A request the engine ended early: CANCELLED only comes from a drain past its deadline.
  std::optional<absl::Status> error;
  if (finish.has_value()) {
    if (!finish->first.ok()) {
      error = finish->first;
    } else if (finish->second.reason == FinishReason::kCancelled) {
      error = absl::UnavailableError("the server is shutting down; the request was cancelled");
    }
  }
  if (!exchange->stream) {
    response.Append(tokens);
    if (!finish.has_value()) return;
    if (error.has_value()) {
      ReplyError(*exchange, *error);
    } else {
      Reply(*exchange, 200, response.Finish(finish->second));
    }
    return;
  }
  evhttp_request* req = exchange->req;
  if (!exchange->started) {
    // The status waits for the first token, so that an error the engine finds before any
    // (an unknown or busy session) is answered with its own status.
    if (error.has_value() && tokens.empty()) {
      ReplyError(*exchange, *error);
      return;
    }
    evkeyvalq* headers = evhttp_request_get_output_headers(req);
    evhttp_add_header(headers, "Content-Type", "text/event-stream");
    evhttp_add_header(headers, "Cache-Control", "no-cache");
    evhttp_add_header(headers, "X-Request-Id", exchange->request_id.c_str());
    evhttp_send_reply_start(req, 200, "OK");
    exchange->started = true;
  }
  std::string out = response.StreamTokens(tokens);
  if (finish.has_value()) {
    out += error.has_value() ? OpenAiResponse::StreamError(*error)
                             : response.StreamFinish(finish->second);
  }
  if (!out.empty()) {
    evbuffer* buffer = evbuffer_new();
    evbuffer_add(buffer, out.data(), out.size());
    evhttp_send_reply_chunk(req, buffer);
    evbuffer_free(buffer);
  }
  if (finish.has_value()) {
    Done(*exchange, 200);
    evhttp_send_reply_end(req);
    live_.erase(exchange.get());
  }
}

OpenAiServer::OpenAiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(Engine& engine,
                                                                  const Authenticator& auth,
                                                                  MetricsRegistry& metrics,
                                                                  OpenAiServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be in [0, 65535], got ", options.port));
  }
  if (options.max_connections < 1 || options.max_connections > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_connections must be in [1, 1048576], got ", options.max_connections));
  }
  if (options.request_deadline < absl::Seconds(1) || options.request_deadline > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_deadline must be in [1s, 1h], got ",
                     absl::FormatDuration(options.request_deadline)));
  }
  auto impl = std::make_unique<Impl>(engine, auth, metrics, std::move(options));
  if (absl::Status s = impl->Bind(); !s.ok()) return s;
  spdlog::info(
      "HTTP: OpenAI API (/v1/completions, /v1/chat/completions, /v1/models, "
      "/v1/sessions) on port {}",
      impl->port());
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

int OpenAiServer::port() const { return impl_->port(); }

void OpenAiServer::Stop() { impl_->Stop(); }

}  // namespace linserve
