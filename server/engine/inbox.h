// Inbox: the bounded queue between the engine's callers and the engine thread, and the count
// of the work it admitted.
//
// Callers post operations (a submitted request's acceptance, a session operation) and return
// at once; the engine thread runs them all at the top of each loop iteration. Admission is
// refused, by calling the operation at once with the error, when the engine is draining
// (UNAVAILABLE), when its tenant has tenant_max_queued waiting, or when max_queue_depth
// requests and operations are waiting (RESOURCE_EXHAUSTED naming the limit). A request stays
// queued, for these limits, until it gets a state slot or ends; a session operation until it
// runs. Shutdown drains (no admission, waiting until no request is queued or running) and then
// closes the inbox, which answers what is still in it with UNAVAILABLE.
//
// Thread-safe.
#ifndef LINSERVE_SERVER_ENGINE_INBOX_H_
#define LINSERVE_SERVER_ENGINE_INBOX_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace linserve {

class Inbox {
 public:
  // An entry: called with OK on the engine thread, or with the reason it was not run (queue
  // full, shutting down) on whichever thread found that out.
  using Op = absl::AnyInvocable<void(absl::Status) &&>;

  // `tenant_max_queued` 0: no quota per tenant. `tenant_max_queued_rejections` counts the
  // refusals for that quota and must outlive the inbox.
  Inbox(int32_t max_queue_depth, int32_t tenant_max_queued,
        Counter& tenant_max_queued_rejections);
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  // Queues `op` of `tenant` unless the queue is full, the tenant has tenant_max_queued waiting
  // or the engine is draining; then calls it with that error at once and returns the error.
  // A request (`is_request`) counts as `requests` (its choices, >= 1) against both limits; each
  // stays counted until Activated or Ended.
  absl::Status Post(Op op, bool is_request, const std::string& tenant, int32_t requests = 1);
  // Queues `op` whatever the queue depth (cancellations and shutdown steps); dropped once
  // closed.
  void PostAlways(Op op);

  // Engine thread: marks this thread as the one that runs the operations.
  void BindEngineThread();
  // Whether the calling thread is the engine thread (BindEngineThread).
  bool OnEngineThread() const;
  // Engine thread: runs every queued operation, calling `after_each` after each one.
  void RunAll(absl::FunctionRef<void()> after_each);
  // Engine thread: waits until an operation is queued or `timeout` has passed.
  void Wait(absl::Duration timeout);

  // A queued request of `tenant` got a state slot: it is running.
  void Activated(const std::string& tenant);
  // A request of `tenant` ended, running (`active`) or still queued.
  void Ended(bool active, const std::string& tenant);

  struct Depth {
    // Submitted requests not yet running.
    int32_t queued_requests = 0;
    // Those plus session operations not yet run.
    int32_t queue_depth = 0;
  };
  Depth depth() const;
  bool draining() const;

  // Stops admission (UNAVAILABLE from then on) and waits until no request is queued or running,
  // or until `deadline`. Returns false, at once, when the inbox is closed already.
  bool Drain(absl::Time deadline);
  // Calls every operation still queued with UNAVAILABLE; later PostAlways calls are dropped.
  void Close();

 private:
  struct Queued {
    Op op;
    // The tenant of a session operation, whose queued work ends when it runs; nullopt for a
    // request (queued until it gets a slot or ends) and for PostAlways's entries.
    std::optional<std::string> op_tenant;
  };
  // One of the tenant's queued requests or operations has left the queue.
  void UnqueueLocked(const std::string& tenant) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); }
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_requests_ == 0 && active_requests_ == 0;
  }

  const int32_t max_queue_depth_;
  const int32_t tenant_max_queued_;
  Counter& tenant_max_queued_rejections_;

  mutable absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // Submitted requests not yet running (in the queue or waiting for a slot).
  int32_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;
  // Session operations in the queue.
  int32_t queued_ops_ ABSL_GUARDED_BY(mu_) = 0;
  // Each tenant's share of queued_requests_ + queued_ops_; tenants with none have no entry.
  absl::flat_hash_map<std::string, int32_t> queued_by_tenant_ ABSL_GUARDED_BY(mu_);
  // Requests holding a slot, kept where Drain can wait on them.
  int32_t active_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_INBOX_H_
