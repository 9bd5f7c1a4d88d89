// GenerateReactor: one Generate stream. Submits the request to the engine, turns the engine's
// tokens into GenerateResponse messages and writes them with one write in flight at a time:
// tokens that arrive while a write is pending are merged into a message still waiting to be
// written (one per choice of a request with n > 1; a message holds at most
// kMaxPromptTokensPerMessage prompt tokens), so the engine thread never waits for a client. A
// client cancellation or deadline cancels the engine jobs (one per choice); so does a choice's
// failure, which ends the call with its status.
//
// Lifetime: the reactor is deleted when both gRPC is done with it (OnDone) and the engine has
// finished with it (each choice's sink's OnFinish, or a rejected Submit), whichever comes last.
#ifndef LINSERVE_SERVER_TRANSPORT_GENERATE_REACTOR_H_
#define LINSERVE_SERVER_TRANSPORT_GENERATE_REACTOR_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "linserve/v1/generate.pb.h"
#include "server/engine/job_id.h"
#include "server/engine/token_sink.h"
#include "server/transport/request_context.h"
#include "server/transport/service_env.h"

namespace linserve {

// Most prompt tokens (GenerateRequest.prompt_logprobs) in one message: with 20 alternatives
// each, about 1 MiB, well within a client's default 4 MiB receive limit.
inline constexpr int kMaxPromptTokensPerMessage = 4096;

class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  // Starts the call; `request` is owned by gRPC and read only here.
  GenerateReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // From the engine's emitter threads, through choice `choice`'s sink.
  void Deliver(int32_t choice, const GeneratedToken& token, std::string_view text);
  void DeliverPrompt(int32_t choice, absl::Span<const PromptToken> tokens);
  void Complete(int32_t choice, const absl::Status& status, const GenerationResult& result);

 private:
  // What to do once the lock is released: at most one gRPC operation.
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    grpc::Status status;
  };
  // A message waiting to be written.
  struct Pending {
    v1::GenerateResponse message;
    int32_t choice = 0;
    bool open = true;  // more of its choice's output may be merged into it
    bool last = false;  // the stream's last message
  };
  // The message `choice`'s next output goes into: its latest queued one while open, else a new
  // one at the back of the queue.
  Pending& OpenMessageLocked(int32_t choice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the next queued message into in_flight_ and asks for a write, or asks to finish once
  // nothing is left to write.
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(const Action& action);
  void CancelJobs();
  // Drops one of the holds on the reactor's life (gRPC's, and one per choice's engine job); the
  // last drop deletes it.
  void Release();

  const ServiceEnv& env_;
  grpc::CallbackServerContext* const context_;
  // Set before anything can call back, read-only afterwards.
  const RequestContext call_;
  int32_t choices_ = 1;  // n, set before Submit
  std::atomic<int> holds_{2};

  absl::Mutex mu_;
  std::vector<JobId> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  // Choices not finished yet, and the usage of those that are (n > 1).
  int32_t running_ ABSL_GUARDED_BY(mu_) = 1;
  v1::Usage usage_ ABSL_GUARDED_BY(mu_);
  int32_t session_choice_ ABSL_GUARDED_BY(mu_) = 0;  // whose session_tokens the usage reports
  // The message being written; gRPC reads it until OnWriteDone.
  v1::GenerateResponse in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_is_last_ ABSL_GUARDED_BY(mu_) = false;
  // An error to finish with once the write in flight is done.
  std::optional<grpc::Status> error_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_GENERATE_REACTOR_H_
