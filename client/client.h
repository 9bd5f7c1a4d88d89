// linserve's C++ client library: a thin, thread-safe layer over the generated linserve.v1 and
// grpc.health.v1 stubs that adds per-call deadlines, the bearer token, TLS, absl::Status
// errors and a cancellable streaming Generate. Used by the CLI, the load tester and the
// integration tests.
#ifndef LINSERVE_CLIENT_CLIENT_H_
#define LINSERVE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "linserve/v1/service.grpc.pb.h"

namespace linserve {

// The gRPC metadata key naming the session a call acts on. The client sends it on every call
// that names a session (Generate with a session_id, Get, Fork, Delete, Export) and on
// CreateSession and ImportSession with the id it proposes, so a proxy that hashes it
// (docs/deployment.md) routes every call of a session, the first included, to one replica.
inline constexpr char kSessionHeader[] = "linserve-session";

struct ClientOptions {
  // The server, "host:port". Default: "localhost:50051".
  std::string target = "localhost:50051";
  // Connect with TLS. Default: false.
  bool tls = false;
  // PEM root certificates that must have signed the server's certificate; "" = the system's
  // roots. Default: "".
  std::string tls_root_certs;
  // The name the server's certificate must carry when it differs from the target's host (e.g.
  // connecting by IP address); "" = the target's host. Default: "".
  std::string tls_server_name;
  // PEM certificate chain and private key presented to a server that asks for client
  // certificates (mutual TLS); both or neither. Default: "" (none).
  std::string tls_client_cert_chain;
  std::string tls_client_key;
  // Sent as "authorization: Bearer <token>" on every linserve.v1 call (never on health
  // checks); "" = none. Default: "".
  std::string auth_token;
  // Deadline of each call unless CallOptions says otherwise; InfiniteDuration = none.
  // Default: 60 seconds.
  absl::Duration timeout = absl::Seconds(60);
  // Retry a call that ends UNAVAILABLE before any response (up to 5 attempts, backoff from
  // 0.5 s to 4 s): linserve answers UNAVAILABLE before changing anything while it drains, and
  // a proxy does when the replica it picked is gone, so behind a proxy the retry reaches the
  // replica that now serves the session. Off, an unreachable server fails the call at once.
  // Default: false.
  bool retry_unavailable = false;
};

struct CallOptions {
  // Overrides ClientOptions::timeout for this call. Default: nullopt (the client's timeout).
  std::optional<absl::Duration> timeout;
  // Generate only: sent as x-request-id, naming the request in the server's logs and echoed in
  // the last message; "" = the server picks one. Default: "".
  std::string request_id;
};

class Client;

// One streaming Generate started by Client::StartGenerate. Thread-safe. Destroying it cancels
// the call if it is still running and waits for its end.
class GenerateStream {
 public:
  ~GenerateStream();
  GenerateStream(const GenerateStream&) = delete;
  GenerateStream& operator=(const GenerateStream&) = delete;

  // Asks the server to stop; the stream then ends with CANCELLED (unless it already ended).
  void Cancel();
  // Blocks until the stream ends; its final status.
  absl::Status Wait();
  // Whether the stream has ended.
  bool done() const;

 private:
  friend class Client;
  class Reactor;
  struct State;
  GenerateStream(std::shared_ptr<State> state, std::unique_ptr<Reactor> reactor);

  // Shared with the reactor so that its mutex outlives the reactor's last use of it.
  std::shared_ptr<State> state_;
  // Null when the call never started; deleted only after the call ended.
  std::unique_ptr<Reactor> reactor_;
};

class Client {
 public:
  // Called for every GenerateResponse in order; return false to cancel the call.
  using MessageCallback = absl::FunctionRef<bool(const v1::GenerateResponse&)>;
  // Called on a gRPC thread for every GenerateResponse of a StartGenerate stream, in order.
  using AsyncMessageCallback = std::function<void(const v1::GenerateResponse&)>;

  // Creates the channel (connecting lazily). INVALID_ARGUMENT for an empty target, TLS-only
  // options without tls, or a client certificate without its key (or the reverse).
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // Streams one generation, calling `on_message` on this thread for each message. Returns the
  // call's status: OK after the last message (finish_reason set), CANCELLED when on_message
  // returned false, or the server's error.
  absl::Status Generate(const v1::GenerateRequest& request, MessageCallback on_message,
                        const CallOptions& options = {});
  // Starts a generation without blocking; `on_message` runs on gRPC threads.
  std::unique_ptr<GenerateStream> StartGenerate(const v1::GenerateRequest& request,
                                                AsyncMessageCallback on_message,
                                                const CallOptions& options = {});

  absl::StatusOr<v1::GetModelInfoResponse> GetModelInfo(const CallOptions& options = {});
  absl::StatusOr<std::vector<int32_t>> Tokenize(absl::string_view text,
                                                const CallOptions& options = {});
  absl::StatusOr<std::string> Detokenize(absl::Span<const int32_t> token_ids,
                                         const CallOptions& options = {});

  // Proposes a fresh random id (CreateSessionRequest.session_id) and routes by it.
  absl::StatusOr<v1::Session> CreateSession(const CallOptions& options = {});
  absl::StatusOr<v1::Session> GetSession(absl::string_view session_id,
                                         const CallOptions& options = {});
  // One page; pass the response's next_page_token to get the next (empty on the last page).
  absl::StatusOr<v1::ListSessionsResponse> ListSessions(int32_t page_size,
                                                        absl::string_view page_token,
                                                        const CallOptions& options = {});
  absl::StatusOr<v1::Session> ForkSession(absl::string_view session_id,
                                          const CallOptions& options = {});
  // A fork of the session as it stood at `num_tokens` (one of its boundaries).
  absl::StatusOr<v1::Session> ForkSessionAt(absl::string_view session_id, int64_t num_tokens,
                                            const CallOptions& options = {});
  // Returns the session exactly to `num_tokens`, one of its boundaries.
  absl::StatusOr<v1::Session> RewindSession(absl::string_view session_id, int64_t num_tokens,
                                            const CallOptions& options = {});
  absl::Status DeleteSession(absl::string_view session_id, const CallOptions& options = {});
  // The session's whole snapshot (all chunks concatenated).
  absl::StatusOr<std::string> ExportSession(absl::string_view session_id,
                                            const CallOptions& options = {});
  // Sends a snapshot in chunks of `chunk_bytes`, proposing a fresh random id as CreateSession
  // does; the new session.
  absl::StatusOr<v1::Session> ImportSession(absl::string_view snapshot,
                                            const CallOptions& options = {},
                                            int32_t chunk_bytes = 1 << 20);

  // grpc.health.v1 Check of `service` ("" = the whole server; "linserve.v1.LinServe").
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
      const std::string& service = "", const CallOptions& options = {});

  // Cancels every call in flight and makes every later call fail at once with CANCELLED.
  void CancelAll();

 private:
  friend class GenerateStream;
  Client(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel);

  // Sets the deadline, unless `health` the token, and kSessionHeader when `session_id` is not
  // empty. False (leaving `context` unused) once CancelAll was called; otherwise the context is
  // tracked until Untrack.
  bool Prepare(grpc::ClientContext& context, const CallOptions& options, bool health = false,
               absl::string_view session_id = "");
  void Untrack(grpc::ClientContext& context);

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LinServe::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;

  absl::Mutex mu_;
  absl::flat_hash_set<grpc::ClientContext*> live_ ABSL_GUARDED_BY(mu_);
  bool cancelled_all_ ABSL_GUARDED_BY(mu_) = false;
};

// gRPC status -> absl::Status (the codes share their numbering).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace linserve

#endif  // LINSERVE_CLIENT_CLIENT_H_
