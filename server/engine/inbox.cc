#include "server/engine/inbox.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

// The inbox whose operations this thread runs (nullptr on any other thread).
thread_local const Inbox* engine_thread_inbox = nullptr;

}  // namespace

Inbox::Inbox(int32_t max_queue_depth, int32_t tenant_max_queued,
             Counter& tenant_max_queued_rejections)
    : max_queue_depth_(max_queue_depth),
      tenant_max_queued_(tenant_max_queued),
      tenant_max_queued_rejections_(tenant_max_queued_rejections) {}

absl::Status Inbox::Post(Op op, bool is_request, const std::string& tenant, int32_t requests) {
  absl::Status rejected;
  const int64_t count = is_request ? requests : 1;
  // A request of several choices says how it counts.
  const std::string as = count > 1 ? absl::StrCat(" (this request counts as ", count, ")") : "";
  {
    absl::MutexLock lock(&mu_);
    auto mine = queued_by_tenant_.find(tenant);
    const int64_t queued_mine = mine == queued_by_tenant_.end() ? 0 : mine->second;
    if (draining_) {
      rejected = absl::UnavailableError("the server is shutting down and accepts no new work");
    } else if (tenant_max_queued_ > 0 && queued_mine + count > tenant_max_queued_) {
      rejected = absl::ResourceExhaustedError(absl::StrCat(
          "this tenant's queue quota is full: tenant_max_queued (", tenant_max_queued_,
          ") of its requests and operations would be waiting", as, "; retry later"));
      tenant_max_queued_rejections_.Increment();
    } else if (queued_requests_ + queued_ops_ + count > max_queue_depth_) {
      rejected = absl::ResourceExhaustedError(absl::StrCat(
          "the engine queue is full: max_queue_depth (", max_queue_depth_,
          ") requests and operations would be waiting", as, "; retry later"));
    } else {
      queue_.push_back(
          Queued{.op = std::move(op),
                 .op_tenant = is_request ? std::nullopt : std::optional<std::string>(tenant)});
      (is_request ? queued_requests_ : queued_ops_) += static_cast<int32_t>(count);
      queued_by_tenant_[tenant] += static_cast<int32_t>(count);
      return absl::OkStatus();
    }
  }
  std::move(op)(rejected);
  return rejected;
}

void Inbox::PostAlways(Op op) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  queue_.push_back(Queued{.op = std::move(op), .op_tenant = std::nullopt});
}

void Inbox::BindEngineThread() { engine_thread_inbox = this; }

bool Inbox::OnEngineThread() const { return engine_thread_inbox == this; }

void Inbox::RunAll(absl::FunctionRef<void()> after_each) {
  std::deque<Queued> ops;
  {
    absl::MutexLock lock(&mu_);
    ops.swap(queue_);
    queued_ops_ = 0;
    for (const Queued& queued : ops) {
      if (queued.op_tenant.has_value()) UnqueueLocked(*queued.op_tenant);
    }
  }
  for (Queued& queued : ops) {
    std::move(queued.op)(absl::OkStatus());
    after_each();
  }
}

void Inbox::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &Inbox::HasWorkLocked), timeout);
}

void Inbox::UnqueueLocked(const std::string& tenant) {
  auto mine = queued_by_tenant_.find(tenant);
  if (--mine->second == 0) queued_by_tenant_.erase(mine);
}

void Inbox::Activated(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  --queued_requests_;
  UnqueueLocked(tenant);
  ++active_requests_;
}

void Inbox::Ended(bool active, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  if (active) {
    --active_requests_;
  } else {
    --queued_requests_;
    UnqueueLocked(tenant);
  }
}

Inbox::Depth Inbox::depth() const {
  absl::MutexLock lock(&mu_);
  return {.queued_requests = queued_requests_, .queue_depth = queued_requests_ + queued_ops_};
}

bool Inbox::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool Inbox::Drain(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  draining_ = true;
  if (!mu_.AwaitWithDeadline(absl::Condition(this, &Inbox::IdleLocked), deadline)) {
    spdlog::warn("engine: drain deadline passed with {} requests queued or running; "
                 "cancelling them",
                 queued_requests_ + active_requests_);
  }
  return true;
}

void Inbox::Close() {
  std::deque<Queued> leftover;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    leftover.swap(queue_);
  }
  for (Queued& queued : leftover) {
    std::move(queued.op)(absl::UnavailableError("the server is shutting down"));
  }
}

}  // namespace linserve
