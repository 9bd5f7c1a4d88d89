#include "server/transport/loop_mailbox.h"

#include <utility>

namespace linserve {

void LoopMailbox::Post(absl::AnyInvocable<void() &&> fn) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  const bool wake = queue_.empty();
  queue_.push_back(std::move(fn));
  if (wake) event_active(wake_, EV_READ, 0);
}

void LoopMailbox::Drain() {
  std::vector<absl::AnyInvocable<void() &&>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  for (auto& fn : batch) std::move(fn)();
}

void LoopMailbox::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  queue_.clear();
}

}  // namespace linserve
