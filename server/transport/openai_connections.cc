// The OpenAI API's connections before their requests reach a route (openai_server_impl.h).
#include <errno.h>
#include <event2/buffer.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/transport/openai_server_impl.h"

namespace linserve {
namespace {

// Most of a connection's first request head the server copies to check it (the headers, their
// request line and a read's worth more); a head not complete within it is refused.
constexpr size_t kMaxHeadBytes = kMaxHeadersBytes + (16 << 10);

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

// `n` bytes of `input` from offset `at`.
std::string Copy(evbuffer* input, size_t at, size_t n) {
  std::string out(n, '\0');
  if (n == 0) return out;
  evbuffer_ptr from;
  evbuffer_ptr_set(input, &from, at, EVBUFFER_PTR_SET);
  evbuffer_copyout_from(input, &from, out.data(), n);
  return out;
}

// What a request's head says of its body, as evhttp 2.1 reads it: only POST, PUT and PATCH
// have one; chunked when its first Transfer-Encoding header is "chunked" (evhttp refuses any
// other transfer coding), else Content-Length bytes (none without one).
struct BodyFraming {
  bool chunked = false;
  int64_t length = 0;
};

// The body framing of a complete head (request line, header lines, blank line) into `body`;
// or the refusal (400 a malformed length, 413 a body over `limit`), as evhttp would answer
// them in HTML.
std::optional<ApiError> BodyFramingError(absl::string_view head, int64_t limit,
                                         BodyFraming* body) {
  std::optional<absl::string_view> length;
  std::optional<absl::string_view> transfer_encoding;
  absl::string_view method;
  bool request_line = true;
  for (absl::string_view line : absl::StrSplit(head, '\n')) {
    if (std::exchange(request_line, false)) {
      method = line.substr(0, line.find(' '));
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Transfer-Encoding") && !transfer_encoding.has_value()) {
      transfer_encoding = value;
    } else if (absl::EqualsIgnoreCase(name, "Content-Length") && !length.has_value()) {
      length = value;
    }
  }
  if (method != "POST" && method != "PUT" && method != "PATCH") return std::nullopt;
  if (transfer_encoding.has_value()) {
    if (!absl::EqualsIgnoreCase(*transfer_encoding, "chunked")) {
      return ToApiError(absl::InvalidArgumentError(absl::StrCat(
          "Transfer-Encoding: \"", absl::CHexEscape(transfer_encoding->substr(0, 64)),
          "\" is not supported (only chunked)")));
    }
    body->chunked = true;
    return std::nullopt;
  }
  if (!length.has_value()) return std::nullopt;
  int64_t bytes = 0;
  const bool digits = !length->empty() && length->size() <= 18 &&
                      std::all_of(length->begin(), length->end(), absl::ascii_isdigit) &&
                      absl::SimpleAtoi(*length, &bytes);
  if (!digits) {
    return ToApiError(absl::InvalidArgumentError(absl::StrCat(
        "Content-Length: \"", absl::CHexEscape(length->substr(0, 64)),
        "\" is not a byte count (digits, at most 18 of them)")));
  }
  if (bytes > limit) {
    ApiError error = ToApiError(absl::InvalidArgumentError(
        absl::StrCat("body: the request body (", bytes, " bytes, by Content-Length) exceeds ",
                     limit, " bytes (max_prompt_bytes + 1 MiB)")));
    error.http_status = 413;
    return error;
  }
  body->length = bytes;
  return std::nullopt;
}

// An answer the server writes on a connection itself, evhttp aside.
std::string RawReply(int status, absl::string_view body) {
  const absl::string_view reason = status == 401   ? "Unauthorized"
                                   : status == 403 ? "Forbidden"
                                   : status == 413 ? "Content Too Large"
                                   : status == 503 ? "Service Unavailable"
                                                   : "Bad Request";
  return absl::StrCat("HTTP/1.1 ", status, " ", reason,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

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
  if (connection.pipelined) return;
  // The bytes just read are the input's last; evhttp has not seen them yet.
  const size_t at = evbuffer_get_length(input) - info->n_added;
  switch (connection.state) {
    case Connection::State::kIdle:  // a new request's first bytes
      connection.state = Connection::State::kHead;
      break;
    case Connection::State::kHead:
      break;
    case Connection::State::kReading:
      if (connection.chunked.has_value()) {
        server.MeterBody(connection, Copy(input, at, info->n_added));
      } else if (static_cast<int64_t>(info->n_added) <= connection.body_left) {
        connection.body_left -= static_cast<int64_t>(info->n_added);
      } else {
        connection.pipelined = true;  // past the body: the next request
      }
      return;
    case Connection::State::kServing:
      connection.pipelined = true;  // the next request, before this one's answer
      return;
    case Connection::State::kRefused:
      return;
  }
  if (!evtimer_pending(connection.deadline, nullptr)) {
    const timeval deadline = absl::ToTimeval(server.options_.request_deadline);
    evtimer_add(connection.deadline, &deadline);
  }
  std::string& head = connection.head;
  const size_t before = head.size();
  const size_t take = std::min(info->n_added, kMaxHeadBytes - before);
  head += Copy(input, at, take);
  server.CheckHead(connection, before, input, at + take, info->n_added - take);
}

void OpenAiServer::Impl::CheckHead(Connection& connection, size_t checked, evbuffer* input,
                                   size_t rest_at, size_t rest) {
  // A blank line ends at a newline among the new bytes (one before would have ended it before).
  const size_t end = HeadEnd(connection.head, checked);
  const bool complete = end != absl::string_view::npos;
  if ((complete && end > static_cast<size_t>(kMaxHeadersBytes)) ||
      (!complete && connection.head.size() == kMaxHeadBytes)) {
    Refuse(connection, 400,
           ApiErrorJson(ToApiError(absl::InvalidArgumentError(absl::StrCat(
               "headers: the request's head exceeds ", kMaxHeadersBytes, " bytes")))),
           /*linger=*/true, "headers");
    return;
  }
  if (!complete) return;
  const absl::string_view head = absl::string_view(connection.head).substr(0, end);
  if (std::exchange(connection.first, false)) {
    absl::StatusOr<std::string> tenant = auth_.AuthenticateHttp(AuthorizationIn(head));
    if (!tenant.ok()) {
      const ApiError error = ToApiError(tenant.status());
      Refuse(connection, error.http_status, ApiErrorJson(error), /*linger=*/true,
             "unauthenticated");
      return;
    }
  }
  BodyFraming body;
  if (std::optional<ApiError> error = BodyFramingError(head, max_body_bytes_, &body);
      error.has_value()) {
    Refuse(connection, error->http_status, ApiErrorJson(*error), /*linger=*/true,
           error->http_status == 413 ? "body" : "framing");
    return;
  }
  connection.state = Connection::State::kReading;
  connection.body_left = body.length;
  const std::string after_head = connection.head.substr(end);
  std::string().swap(connection.head);
  if (body.chunked) {
    connection.chunked.emplace(max_body_bytes_);
    MeterBody(connection, after_head);
    if (rest > 0 && connection.state == Connection::State::kReading) {
      MeterBody(connection, Copy(input, rest_at, rest));
    }
    return;
  }
  const int64_t arrived = static_cast<int64_t>(after_head.size() + rest);
  if (arrived > connection.body_left) {
    connection.pipelined = true;  // the next request came with this one
  } else {
    connection.body_left -= arrived;
  }
}

void OpenAiServer::Impl::MeterBody(Connection& connection, absl::string_view bytes) {
  switch (connection.chunked->Feed(bytes)) {
    case ChunkedBodyMeter::Verdict::kMore:
      return;
    case ChunkedBodyMeter::Verdict::kComplete:
      connection.pipelined = connection.chunked->left_over() > 0;  // the next request's bytes
      connection.chunked.reset();
      return;
    case ChunkedBodyMeter::Verdict::kTooLarge: {
      ApiError error = ToApiError(absl::InvalidArgumentError(absl::StrCat(
          "body: the request body exceeds ", max_body_bytes_,
          " bytes (max_prompt_bytes + 1 MiB)")));
      error.http_status = 413;
      connection.chunked.reset();
      Refuse(connection, 413, ApiErrorJson(error), /*linger=*/true, "body");
      return;
    }
    case ChunkedBodyMeter::Verdict::kMalformed:
      connection.chunked.reset();
      Refuse(connection, 400,
             ApiErrorJson(ToApiError(absl::InvalidArgumentError(
                 "body: its chunked transfer coding is malformed (RFC 9112 §7.1)"))),
             /*linger=*/true, "framing");
      return;
  }
}

void OpenAiServer::Impl::OnDeadline(evutil_socket_t, short, void* arg) {
  Connection& connection = *static_cast<Connection*>(arg);
  if (connection.state != Connection::State::kHead &&
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
  linger->readable = event_new(listener_->base(), fd, EV_READ, &Impl::OnLingerReadable, linger.get());
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

}  // namespace linserve
