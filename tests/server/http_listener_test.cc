// HttpListener's loop outlives a write to a client that left. libevent writes with writev, which
// raises SIGPIPE when the peer's end is gone; its default action ends the whole process, silently
// (the OpenAI client test once lost its server that way while it aborted streams).
#include "server/transport/http_listener.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

// A chunked reply the test holds open, on the loop thread.
struct Stream {
  evhttp_request* req = nullptr;
  int fd = -1;  // the server's end of the connection
  absl::Notification started;
  absl::Notification closed;
  // The loop waits inside an event of its own until the client has left.
  absl::Notification holding;
  absl::Notification client_left;
};

void SendChunk(evhttp_request* req) {
  evbuffer* chunk = evbuffer_new();
  evbuffer_add_printf(chunk, "data: token\n\n");
  evhttp_send_reply_chunk(req, chunk);
  evbuffer_free(chunk);
}

void OnClose(evhttp_connection*, void* arg) {
  Stream& stream = *static_cast<Stream*>(arg);
  // A request libevent detached from its failed connection is its handler's to free.
  if (evhttp_request_get_connection(stream.req) == nullptr) evhttp_request_free(stream.req);
  stream.closed.Notify();
}

void OnStream(evhttp_request* req, void* arg) {
  Stream& stream = *static_cast<Stream*>(arg);
  stream.req = req;
  evhttp_connection* connection = evhttp_request_get_connection(req);
  stream.fd = bufferevent_getfd(evhttp_connection_get_bufferevent(connection));
  evhttp_connection_set_closecb(connection, &OnClose, &stream);
  evhttp_send_reply_start(req, 200, "OK");
  SendChunk(req);
  stream.started.Notify();
}

// Queues a chunk (the write waits for the loop's next poll), then holds the loop until the
// client has left: that poll finds the socket both readable and failed, and libevent runs the
// write first.
void OnHold(evutil_socket_t, short, void* arg) {
  Stream& stream = *static_cast<Stream*>(arg);
  SendChunk(stream.req);
  stream.holding.Notify();
  stream.client_left.WaitForNotification();
}

void OnOk(evhttp_request* req, void*) {
  evbuffer* body = evbuffer_new();
  evbuffer_add_printf(body, "ok");
  evhttp_send_reply(req, 200, "OK", body);
  evbuffer_free(body);
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads until `until` arrives (or the connection ends); what was read.
std::string Exchange(int fd, const std::string& request, const std::string& until) {
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string read;
  char buffer[4096];
  while (read.find(until) == std::string::npos) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    read.append(buffer, n);
  }
  return read;
}

int TcpState(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length);
  return info.tcpi_state;
}

// Waits (up to 10 s) until `fd`'s TCP state is `state`.
bool WaitForState(int fd, int state) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (TcpState(fd) != state) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// The client half-closes (the server's socket is in CLOSE_WAIT), then resets: the next write on
// the server's socket fails with EPIPE, which raises SIGPIPE.
TEST(HttpListenerTest, TheLoopOutlivesAWriteToAClientThatLeft) {
  absl::StatusOr<std::unique_ptr<HttpListener>> listener = HttpListener::Bind("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  Stream stream;
  evhttp_set_cb((*listener)->http(), "/stream", &OnStream, &stream);
  evhttp_set_cb((*listener)->http(), "/ok", &OnOk, nullptr);
  event* hold = event_new((*listener)->base(), -1, 0, &OnHold, &stream);
  (*listener)->Run();

  const int client = Connect((*listener)->port());
  ASSERT_GE(client, 0);
  const std::string start =
      Exchange(client, "GET /stream HTTP/1.1\r\nHost: test\r\n\r\n", "data: token");
  ASSERT_NE(start.find("data: token"), std::string::npos) << start;
  stream.started.WaitForNotification();

  event_active(hold, EV_TIMEOUT, 0);
  stream.holding.WaitForNotification();
  // A failed assertion below must not leave the loop held (Stop would wait for it forever).
  absl::Cleanup release = [&stream] {
    if (!stream.client_left.HasBeenNotified()) stream.client_left.Notify();
  };
  shutdown(client, SHUT_WR);
  ASSERT_TRUE(WaitForState(stream.fd, TCP_CLOSE_WAIT));
  const linger reset{.l_onoff = 1, .l_linger = 0};
  setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(client);
  ASSERT_TRUE(WaitForState(stream.fd, TCP_CLOSE));
  std::move(release).Invoke();

  // The failed write ends the connection; the loop goes on serving.
  ASSERT_TRUE(stream.closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const int next = Connect((*listener)->port());
  ASSERT_GE(next, 0);
  const std::string answer =
      Exchange(next, "GET /ok HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", "\r\n\r\nok");
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
  close(next);
  (*listener)->Stop();
  event_free(hold);
}

}  // namespace
}  // namespace linserve
