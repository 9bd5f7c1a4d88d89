#include "server/transport/http_listener.h"

#include <event2/listener.h>
#include <event2/thread.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

// Pending connections the kernel may hold before the loop accepts them: a burst of clients
// connecting at once is queued, not refused.
constexpr int kListenBacklog = 4096;

void BreakLoop(evutil_socket_t, short, void* base) {
  event_base_loopbreak(static_cast<event_base*>(base));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Bind(const std::string& host,
                                                                 int port) {
  // Engine threads wake the loops (event_active): libevent must lock.
  static const int threads = evthread_use_pthreads();
  if (threads != 0) return absl::InternalError("libevent: evthread_use_pthreads failed");
  std::unique_ptr<HttpListener> listener(new HttpListener());
  listener->base_ = event_base_new();
  if (listener->base_ == nullptr) return absl::InternalError("libevent: event_base_new failed");
  listener->http_ = evhttp_new(listener->base_);
  if (listener->http_ == nullptr) return absl::InternalError("libevent: evhttp_new failed");
  listener->stop_ = event_new(listener->base_, -1, 0, &BreakLoop, listener->base_);

  sockaddr_storage address{};
  int length = sizeof(address);
  // The host alone (libevent refuses port 0 in "host:port"); the port is set below.
  if (evutil_parse_sockaddr_port(host.c_str(), reinterpret_cast<sockaddr*>(&address), &length) !=
      0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse the host ", host));
  }
  if (address.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&address)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&address)->sin_port = htons(port);
  }
  evconnlistener* bound_listener =
      evconnlistener_new_bind(listener->base_, nullptr, nullptr,
                              LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                              kListenBacklog, reinterpret_cast<sockaddr*>(&address), length);
  if (bound_listener == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", host, ":", port, " (address in use?)"));
  }
  evhttp_bind_listener(listener->http_, bound_listener);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  getsockname(evconnlistener_get_fd(bound_listener), reinterpret_cast<sockaddr*>(&bound),
              &bound_length);
  listener->port_ = bound.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return listener;
}

HttpListener::~HttpListener() {
  Stop();
  if (stop_ != nullptr) event_free(stop_);
  if (base_ != nullptr) event_base_free(base_);
}

void HttpListener::Run() {
  thread_ = std::thread([this] {
    // libevent writes with writev, which raises SIGPIPE on a socket whose client has left (it
    // half-closed, then reset: the write after reads EPIPE). Its default action ends the whole
    // process without a word; blocked here, the signal stays pending on this thread (which
    // never waits for it) and the write fails with EPIPE, which evhttp handles as the client
    // leaving.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    event_base_dispatch(base_);
  });
}

void HttpListener::Stop() {
  if (thread_.joinable()) {
    // From inside the loop: a loop not yet running when asked would forget a break asked
    // from outside (event_base_loop clears it as it starts).
    event_active(stop_, EV_READ, 0);
    thread_.join();
  }
  if (http_ != nullptr) evhttp_free(http_);
  http_ = nullptr;
}

}  // namespace linserve
