#include "server/transport/openai_server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/sessions/session_id.h"
#include "server/transport/openai_model.h"
#include "server/transport/openai_server_impl.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

using nlohmann::json;

// Threads that parse request bodies and tokenize their prompts.
constexpr int kParseThreads = 2;

json SessionJson(const SessionInfo& info) {
  return {{"id", info.id.value},
          {"object", "session"},
          {"num_tokens", info.num_tokens},
          {"resident", info.resident},
          {"busy", info.busy},
          {"created", absl::ToUnixSeconds(info.create_time)},
          {"last_used", absl::ToUnixSeconds(info.last_use_time)}};
}

std::optional<absl::string_view> Header(evhttp_request* req, const char* name) {
  const char* value = evhttp_find_header(evhttp_request_get_input_headers(req), name);
  return value == nullptr ? std::nullopt : std::optional<absl::string_view>(value);
}

}  // namespace

OpenAiServer::Impl::Impl(Engine& engine, const Authenticator& auth, MetricsRegistry& metrics,
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
  context_.constraints = &engine_.constraints();
  max_body_bytes_ = context_.limits.max_prompt_bytes + (int64_t{1} << 20);
}

absl::Status OpenAiServer::Impl::Start() {
  absl::StatusOr<std::unique_ptr<HttpListener>> listener =
      HttpListener::Bind(options_.host, options_.port);
  if (!listener.ok()) return listener.status();
  listener_ = *std::move(listener);
  wake_ = event_new(listener_->base(), -1, 0, &Impl::OnWake, this);
  mailbox_ = std::make_shared<LoopMailbox>(wake_);
  evhttp* http = listener_->http();
  // Every method reaches Route, which answers a wrong one with a JSON 405 and an Allow header.
  evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                       EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                       EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
  // The server checks each head and body size itself as the bytes arrive and answers in JSON
  // (OnInput); evhttp's own limits, which answer in HTML, lie beyond what the server refuses
  // by what it can read before its refusal goes out.
  evhttp_set_max_body_size(http, max_body_bytes_ + kEvhttpSlackBytes);
  evhttp_set_max_headers_size(http, kMaxHeadersBytes + kEvhttpSlackBytes);
  evhttp_set_timeout(http, options_.idle_timeout_seconds);
  evhttp_set_gencb(http, &Impl::OnRequest, this);
  evhttp_set_bevcb(http, &Impl::OnAccept, this);
  port_ = listener_->port();
  listener_->Run();
  return absl::OkStatus();
}

void OpenAiServer::Impl::Stop() {
  if (mailbox_ != nullptr) mailbox_->Close();
  parsers_.Stop();
  // Open requests' jobs are cancelled as their connections close (OnConnectionClose).
  if (listener_ != nullptr) listener_->Stop();
  live_.clear();
  // Connections evhttp freed before they were adopted, and refused ones still lingering.
  while (!connections_.empty()) Forget(*connections_.begin()->second);
  while (!lingering_.empty()) EndLinger(*lingering_.begin()->second);
  if (wake_ != nullptr) event_free(wake_);
  wake_ = nullptr;
  listener_.reset();
}

void OpenAiServer::Impl::Count(absl::string_view endpoint, int status) {
  metrics_
      .GetCounter("linserve_http_requests_total",
                  "Finished OpenAI API requests by endpoint and HTTP status (499: the client "
                  "closed the connection first)",
                  {{"endpoint", std::string(endpoint)}, {"code", absl::StrCat(status)}})
      .Increment();
}

std::shared_ptr<Exchange> OpenAiServer::Impl::Open(evhttp_request* req, Connection& connection,
                                                   std::string endpoint,
                                                   std::string request_id) {
  auto exchange = std::make_shared<Exchange>();
  exchange->server = this;
  exchange->connection = &connection;
  exchange->req = req;
  exchange->endpoint = std::move(endpoint);
  exchange->request_id = std::move(request_id);
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
  exchange.watch = event_new(listener_->base(), bufferevent_getfd(connection), EV_READ | EV_PERSIST,
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
  for (JobId job : exchange.jobs) engine_.Cancel(job);
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
  // Refused as its bytes arrived (OnInput), and read whole by evhttp in the same read: the
  // refusal, about to go out, answers it.
  if (connection->state == Connection::State::kRefused) return;
  evtimer_del(connection->deadline);
  connection->state = Connection::State::kServing;
  connection->chunked.reset();
  const RequestContext call =
      RequestContext::ForHttp(auth_, Header(req, "Authorization"), Header(req, "X-Request-Id"));
  std::shared_ptr<Exchange> exchange = Open(req, *connection, endpoint, call.request_id());
  // Every route, the unknown ones included, answers only an authenticated caller; one that is
  // not is answered and the connection closed (its next request would not be checked before
  // its body).
  if (!call.authenticated()) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    ReplyError(*exchange, call.auth_status());
    return;
  }
  if (route == Route::kNone) {
    ReplyError(*exchange, absl::NotFoundError(absl::StrCat(
                              "no route for ", path,
                              ": this server serves /v1/completions, /v1/chat/completions, "
                              "/v1/models and /v1/sessions")));
    return;
  }
  // A session is read (GET) or deleted (DELETE); the collection takes POST (create).
  const char* allow = route == Route::kModels                    ? "GET"
                      : route == Route::kSessions && !id.empty() ? "GET, DELETE"
                                                                 : "POST";
  const bool allowed = route == Route::kModels ? method == EVHTTP_REQ_GET
                       : route == Route::kSessions && !id.empty()
                           ? method == EVHTTP_REQ_GET || method == EVHTTP_REQ_DELETE
                           : method == EVHTTP_REQ_POST;
  if (!allowed) {
    ApiError error = ToApiError(absl::InvalidArgumentError(
        absl::StrCat("method: not allowed on ", path, " (allowed: ", allow, ")")));
    error.http_status = 405;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
    Reply(*exchange, 405, ApiErrorJson(error));
    return;
  }
  switch (route) {
    case Route::kCompletions:
      Generate(exchange, OpenAiEndpoint::kCompletions, call);
      break;
    case Route::kChat:
      Generate(exchange, OpenAiEndpoint::kChatCompletions, call);
      break;
    case Route::kModels:
      Models(*exchange, id);
      break;
    case Route::kSessions:
      Sessions(exchange, method, id, call.tenant());
      break;
    case Route::kNone:
      break;
  }
}

void OpenAiServer::Impl::Models(Exchange& exchange, absl::string_view id) {
  const json model = OpenAiModelJson(options_.model_id, created_, engine_.model().config);
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
                                  OpenAiEndpoint endpoint, const RequestContext& call) {
  evbuffer* input = evhttp_request_get_input_buffer(exchange->req);
  std::string body(evbuffer_get_length(input), '\0');
  evbuffer_remove(input, body.data(), body.size());
  // A client that leaves while its body is parsed is noticed (and its exchange ends) meanwhile.
  Watch(*exchange);
  // Parsing and tokenizing a large prompt takes a while: not on the loop, which serves every
  // stream.
  parsers_.Post([this, exchange, endpoint, call, body = std::move(body)] {
    absl::StatusOr<OpenAiRequest> request =
        ParseOpenAiRequest(endpoint, body, context_, call.request_id());
    mailbox_->Post([this, exchange, call, request = std::move(request)]() mutable {
      Submit(exchange, call, std::move(request));
    });
  });
}

void OpenAiServer::Impl::Submit(const std::shared_ptr<Exchange>& exchange,
                                const RequestContext& call,
                                absl::StatusOr<OpenAiRequest> request) {
  if (exchange->req == nullptr) return;  // the client left
  if (!request.ok()) {
    ReplyError(*exchange, request.status());
    return;
  }
  call.Apply(request->generate);
  const OpenAiEndpoint endpoint = request->endpoint;
  exchange->stream = request->stream;
  exchange->response.emplace(
      *request,
      absl::StrCat(endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                   exchange->request_id),
      absl::ToUnixSeconds(absl::Now()), options_.model_id, *context_.tokenizer);
  OpenAiRequest& parsed = *request;
  std::vector<std::shared_ptr<TokenSink>> sinks;
  for (int32_t i = 0; i < parsed.generate.n; ++i) {
    sinks.push_back(std::make_shared<Sink>(this, exchange, i));
  }
  absl::StatusOr<std::vector<JobId>> jobs =
      engine_.Submit(std::move(parsed.generate), std::move(sinks));
  if (!jobs.ok()) {
    ReplyError(*exchange, RenameEngineError(jobs.status(), *request));
    return;
  }
  exchange->jobs = *std::move(jobs);
}

void OpenAiServer::Impl::Flush(const std::shared_ptr<Exchange>& exchange) {
  std::vector<std::pair<int32_t, EmittedToken>> tokens;
  std::vector<Exchange::ChoiceEnd> ended;
  {
    absl::MutexLock lock(&exchange->mu);
    tokens.swap(exchange->pending);
    ended.swap(exchange->ended);
    exchange->flush_posted = false;
  }
  if (exchange->req == nullptr) return;  // the client left, or the reply is complete
  OpenAiResponse& response = *exchange->response;
  // A choice the engine ended early fails the request (and the other choices are cancelled):
  // CANCELLED only comes from a drain past its deadline.
  std::optional<absl::Status> error;
  bool all_ended = false;
  for (const Exchange::ChoiceEnd& end : ended) {
    if (!end.status.ok()) {
      error = end.status;
    } else if (end.result.reason == FinishReason::kCancelled) {
      error = absl::UnavailableError("the server is shutting down; the request was cancelled");
    }
    if (error.has_value()) break;
    all_ended = response.EndChoice(end.choice, end.result);
  }
  if (error.has_value()) {
    for (JobId job : exchange->jobs) engine_.Cancel(job);
  }
  // The tokens as runs of one choice each.
  auto for_each_run = [&tokens](auto&& run) {
    for (size_t first = 0; first < tokens.size();) {
      size_t end = first;
      std::vector<EmittedToken> same;
      while (end < tokens.size() && tokens[end].first == tokens[first].first) {
        same.push_back(std::move(tokens[end].second));
        ++end;
      }
      run(tokens[first].first, absl::MakeConstSpan(same));
      first = end;
    }
  };
  if (!exchange->stream) {
    if (error.has_value()) {
      ReplyError(*exchange, *error);
      return;
    }
    for_each_run([&](int32_t choice, absl::Span<const EmittedToken> run) {
      response.Append(choice, run);
    });
    if (all_ended) Reply(*exchange, 200, response.Finish());
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
  std::string out;
  for_each_run([&](int32_t choice, absl::Span<const EmittedToken> run) {
    out += response.StreamTokens(choice, run);
  });
  const bool finished = error.has_value() || all_ended;
  if (error.has_value()) {
    out += OpenAiResponse::StreamError(*error);
  } else {
    for (const Exchange::ChoiceEnd& end : ended) out += response.StreamChoiceEnd(end.choice);
    if (all_ended) out += response.StreamEnd();
  }
  if (!out.empty()) {
    evbuffer* buffer = evbuffer_new();
    evbuffer_add(buffer, out.data(), out.size());
    evhttp_send_reply_chunk(req, buffer);
    evbuffer_free(buffer);
  }
  if (finished) {
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
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  spdlog::info(
      "HTTP: OpenAI API (/v1/completions, /v1/chat/completions, /v1/models, "
      "/v1/sessions) on port {}",
      impl->port());
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

int OpenAiServer::port() const { return impl_->port(); }

void OpenAiServer::Stop() { impl_->Stop(); }

}  // namespace linserve
