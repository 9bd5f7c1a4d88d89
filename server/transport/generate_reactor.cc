#include "server/transport/generate_reactor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/transport/convert.h"

namespace linserve {
namespace {

constexpr std::chrono::milliseconds kDeadlineGrace(100);

// Forwards the engine's calls for one choice to the reactor. The reactor outlives every call:
// it holds on until each choice's OnFinish.
class ChoiceSink : public TokenSink {
 public:
  ChoiceSink(GenerateReactor* reactor, int32_t choice) : reactor_(reactor), choice_(choice) {}
  void OnToken(const GeneratedToken& token, std::string_view text) override {
    reactor_->Deliver(choice_, token, text);
  }
  void OnPromptTokens(absl::Span<const PromptToken> tokens) override {
    reactor_->DeliverPrompt(choice_, tokens);
  }
  void OnFinish(const absl::Status& status, const GenerationResult& result) override {
    reactor_->Complete(choice_, status, result);
  }

 private:
  GenerateReactor* const reactor_;
  const int32_t choice_;
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
    // One hold per choice's job (n is checked by Submit; a refused one takes none).
    choices_ = std::max(parsed->n, 1);
    holds_.store(1 + choices_);
    {
      absl::MutexLock lock(&mu_);
      running_ = choices_;
      session_choice_ = parsed->session_choice.value_or(0);
    }
    std::vector<std::shared_ptr<TokenSink>> sinks;
    for (int32_t i = 0; i < choices_; ++i) sinks.push_back(std::make_shared<ChoiceSink>(this, i));
    absl::StatusOr<std::vector<JobId>> jobs =
        env_.engine().Submit(*std::move(parsed), std::move(sinks));
    if (jobs.ok()) {
      bool cancel = false;
      {
        absl::MutexLock lock(&mu_);
        jobs_ = *std::move(jobs);
        // A client that left, or a choice that failed, before the ids were known.
        cancel = cancelled_ || error_.has_value();
      }
      if (cancel) CancelJobs();
      return;
    }
    status = jobs.status();
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
  for (int32_t i = 0; i < choices_; ++i) Release();
}

GenerateReactor::Pending& GenerateReactor::OpenMessageLocked(int32_t choice) {
  for (auto it = queue_.rbegin(); it != queue_.rend(); ++it) {
    if (it->choice != choice) continue;
    if (it->open) return *it;
    break;
  }
  Pending& pending = queue_.emplace_back();
  pending.choice = choice;
  if (choices_ > 1) pending.message.set_choice(choice);
  return pending;
}

GenerateReactor::Action GenerateReactor::NextActionLocked() {
  if (finished_ || writing_) return {};
  if (cancelled_) {
    finished_ = true;
    final_status_ = grpc::Status::CANCELLED;
    return {Action::kFinish, grpc::Status::CANCELLED};
  }
  if (!queue_.empty()) {
    in_flight_ = std::move(queue_.front().message);
    in_flight_is_last_ = queue_.front().last;
    queue_.pop_front();
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

void GenerateReactor::CancelJobs() {
  std::vector<JobId> jobs;
  {
    absl::MutexLock lock(&mu_);
    jobs = jobs_;
  }
  // Cancelling a job that already finished is a no-op.
  for (JobId job : jobs) env_.engine().Cancel(job);
}

void GenerateReactor::Deliver(int32_t choice, const GeneratedToken& token,
                              std::string_view text) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_ || error_.has_value()) return;
    Pending& pending = OpenMessageLocked(choice);
    ToProto(token, pending.message.add_tokens());
    pending.message.mutable_text()->append(text);
    action = NextActionLocked();
  }
  Run(action);
}

void GenerateReactor::DeliverPrompt(int32_t choice, absl::Span<const PromptToken> tokens) {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_ || error_.has_value()) return;
    for (const PromptToken& token : tokens) {
      Pending* pending = &OpenMessageLocked(choice);
      if (pending->message.prompt_tokens_size() >= kMaxPromptTokensPerMessage) {
        pending->open = false;
        pending = &OpenMessageLocked(choice);
      }
      ToProto(token, pending->message.add_prompt_tokens());
    }
    action = NextActionLocked();
  }
  Run(action);
}

void GenerateReactor::Complete(int32_t choice, const absl::Status& status,
                               const GenerationResult& result) {
  Action action;
  bool cancel_others = false;
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      // The first failure ends the call; the other choices are cancelled.
      if (!error_.has_value() && !finished_) {
        error_ = ToGrpcStatus(status);
        cancel_others = choices_ > 1;
      }
    } else if (!error_.has_value()) {
      Pending& pending = OpenMessageLocked(choice);
      pending.message.mutable_text()->append(result.text);
      pending.message.set_finish_reason(ToProto(result.reason));
      pending.open = false;
      if (choices_ == 1) {
        ToProto(result.usage, pending.message.mutable_usage());
        pending.message.set_request_id(call_.request_id());
        pending.last = true;
      } else {
        // The prompt once (every choice fed the same), the choices' tokens summed.
        v1::Usage one;
        ToProto(result.usage, &one);
        usage_.set_prompt_tokens(one.prompt_tokens());
        usage_.set_cached_prompt_tokens(
            std::max(usage_.cached_prompt_tokens(), one.cached_prompt_tokens()));
        usage_.set_generated_tokens(usage_.generated_tokens() + one.generated_tokens());
        if (one.generated_tokens() > 0 && (usage_.time_to_first_token_us() == 0 ||
                                           one.time_to_first_token_us() <
                                               usage_.time_to_first_token_us())) {
          usage_.set_time_to_first_token_us(one.time_to_first_token_us());
        }
        usage_.set_total_time_us(std::max(usage_.total_time_us(), one.total_time_us()));
        if (choice == 0) usage_.set_seed(one.seed());
        if (choice == session_choice_) usage_.set_session_tokens(one.session_tokens());
        if (--running_ == 0) {
          Pending& last = queue_.emplace_back();
          *last.message.mutable_usage() = usage_;
          last.message.set_request_id(call_.request_id());
          last.open = false;
          last.last = true;
        }
      }
    }
    action = NextActionLocked();
  }
  Run(action);
  if (cancel_others) CancelJobs();
  Release();
}

void GenerateReactor::OnWriteDone(bool ok) {
  Action action;
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      cancelled_ = true;  // the stream broke: nothing more can be sent
      cancel = true;
    } else if (in_flight_is_last_) {
      finished_ = true;
      final_status_ = grpc::Status::OK;
      action = {Action::kFinish, grpc::Status::OK};
    }
    if (action.kind == Action::kNone) action = NextActionLocked();
  }
  if (cancel) CancelJobs();
  Run(action);
}

void GenerateReactor::OnCancel() {
  Action action;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    action = NextActionLocked();
  }
  CancelJobs();
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
