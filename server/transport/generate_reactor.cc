#include "server/transport/generate_reactor.h"

#include <chrono>
#include <utility>

#include "server/transport/convert.h"

namespace linserve {
namespace {

constexpr std::chrono::milliseconds kDeadlineGrace(100);

// Forwards the engine's calls to the reactor. The reactor outlives every call: it is released
// only after OnFinish.
class GenerateSink : public TokenSink {
 public:
  explicit GenerateSink(GenerateReactor* reactor) : reactor_(reactor) {}
  void OnToken(const GeneratedToken& token, std::string_view text) override {
    reactor_->Deliver(token, text);
  }
  void OnPromptTokens(absl::Span<const PromptToken> tokens) override {
    reactor_->DeliverPrompt(tokens);
  }
  void OnFinish(const absl::Status& status, const GenerationResult& result) override {
    reactor_->Complete(status, result);
  }

 private:
  GenerateReactor* const reactor_;
};

}  // namespace

GenerateReactor::GenerateReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                                 const v1::GenerateRequest* request)
    : env_(env), context_(context), call_(RequestContext::ForGrpc(env.auth(), *context)) {
  absl::Status status = call_.auth_status();
  absl::StatusOr<GenerateRequest> parsed =
      status.ok() ? FromProto(*request, *env_.engine().model().tokenizer,
                              env_.engine().options().requests, env_.engine().constraints(),
                              call_.request_id())
                  : absl::StatusOr<GenerateRequest>(status);
  if (parsed.ok()) {
    call_.Apply(*parsed);
    absl::StatusOr<JobId> job =
        env_.engine().Submit(*std::move(parsed), std::make_shared<GenerateSink>(this));
    if (job.ok()) {
      absl::MutexLock lock(&mu_);
      job_ = *job;
      return;
    }
    status = job.status();
  } else {
    status = parsed.status();
  }
  // Rejected before the engine took it: the engine will never call back.
  {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    final_status_ = ToGrpcStatus(status);
  }
  Finish(ToGrpcStatus(status));
  Release();
}

GenerateReactor::Action GenerateReactor::NextActionLocked() {
  if (finished_ || writing_) return {};
  if (cancelled_) {
    finished_ = true;
    final_status_ = grpc::Status::CANCELLED;
    return {Action::kFinish, grpc::Status::CANCELLED};
  }
  if (has_next_) {
    in_flight_ = std::move(next_);
    next_.Clear();
    has_next_ = false;
    in_flight_is_last_ = next_is_last_;
    writing_ = true;
    return {Action::kWrite, {}};
  }
  if (error_.has_value()) {
    finished_ = true;
    final_status_ = *error_;
    return {Action::kFinish, *error_};
  }
  return {};
}

void GenerateReactor::Run(const Action& action) {
  switch (action.kind) {
    case Action::kNone:
      break;
    case Action::kWrite:
      StartWrite(&in_flight_);
      break;
    case Action::kFinish:
      Finish(action.status);
      break;
  }
}

void GenerateReactor::Deliver(const GeneratedToken& token, std::string_view text) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_) return;
    ToProto(token, next_.add_tokens());
    next_.mutable_text()->append(text);
    has_next_ = true;
    action = NextActionLocked();
  }
  Run(action);
}

void GenerateReactor::DeliverPrompt(absl::Span<const PromptToken> tokens) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_) return;
    for (const PromptToken& token : tokens) ToProto(token, next_.add_prompt_tokens());
    has_next_ = true;
    action = NextActionLocked();
  }
  Run(action);
}

void GenerateReactor::Complete(const absl::Status& status, const GenerationResult& result) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      next_.mutable_text()->append(result.text);
      next_.set_finish_reason(ToProto(result.reason));
      ToProto(result.usage, next_.mutable_usage());
      next_.set_request_id(call_.request_id());
      has_next_ = true;
      next_is_last_ = true;
    } else {
      error_ = ToGrpcStatus(status);
    }
    action = NextActionLocked();
  }
  Run(action);
  Release();
}

void GenerateReactor::OnWriteDone(bool ok) {
  Action action;
  std::optional<JobId> job_to_cancel;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      cancelled_ = true;  // the stream broke: nothing more can be sent
      job_to_cancel = job_;
    } else if (in_flight_is_last_) {
      finished_ = true;
      final_status_ = grpc::Status::OK;
      action = {Action::kFinish, grpc::Status::OK};
    }
    if (action.kind == Action::kNone) action = NextActionLocked();
  }
  if (job_to_cancel.has_value()) env_.engine().Cancel(*job_to_cancel);
  Run(action);
}

void GenerateReactor::OnCancel() {
  std::optional<JobId> job;
  Action action;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    job = job_;
    action = NextActionLocked();
  }
  // Cancelling a job that already finished is a no-op.
  if (job.has_value()) env_.engine().Cancel(*job);
  Run(action);
}

void GenerateReactor::OnDone() {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = final_status_;
  }
  // Count an expired deadline as such. The client's own deadline timer usually cancels the
  // call a moment before the server's copy of the deadline (taken when the call arrived)
  // expires, hence the grace.
  if (status.error_code() == grpc::StatusCode::CANCELLED &&
      context_->deadline() <= std::chrono::system_clock::now() + kDeadlineGrace) {
    status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  }
  env_.RecordRpc("Generate", call_.tenant(), status);
  Release();
}

void GenerateReactor::Release() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace linserve
