// GenerateReactor: one Generate stream. Submits the request to the engine, turns the engine's
// tokens into GenerateResponse messages and writes them with one write in flight at a time:
// tokens that arrive while a write is pending are merged into the next message, so the engine
// thread never waits for a client. A client cancellation or deadline cancels the engine job.
//
// Lifetime: the reactor is deleted when both gRPC is done with it (OnDone) and the engine has
// finished with it (its sink's OnFinish, or a rejected Submit), whichever comes last.
#ifndef LINSERVE_SERVER_TRANSPORT_GENERATE_REACTOR_H_
#define LINSERVE_SERVER_TRANSPORT_GENERATE_REACTOR_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "linserve/v1/generate.pb.h"
#include "server/engine/job_id.h"
#include "server/engine/token_sink.h"
#include "server/transport/request_context.h"
#include "server/transport/service_env.h"

namespace linserve {

class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  // Starts the call; `request` is owned by gRPC and read only here.
  GenerateReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // From the engine's emitter threads, through the sink.
  void Deliver(const GeneratedToken& token, std::string_view text);
  void DeliverPrompt(absl::Span<const PromptToken> tokens);
  void Complete(const absl::Status& status, const GenerationResult& result);

 private:
  // What to do once the lock is released: at most one gRPC operation.
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    grpc::Status status;
  };
  // Moves pending output into in_flight_ and asks for a write, or asks to finish once nothing
  // is left to write.
  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(const Action& action);
  // Drops one of the two holds on the reactor's life; the second drop deletes it.
  void Release();

  const ServiceEnv& env_;
  grpc::CallbackServerContext* const context_;
  // Set before anything can call back, read-only afterwards.
  const RequestContext call_;
  std::optional<JobId> job_;
  std::atomic<int> holds_{2};

  absl::Mutex mu_;
  v1::GenerateResponse next_ ABSL_GUARDED_BY(mu_);
  bool has_next_ ABSL_GUARDED_BY(mu_) = false;
  // next_ holds the last message (finish_reason and usage).
  bool next_is_last_ ABSL_GUARDED_BY(mu_) = false;
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
