#include "server/transport/work_pool.h"

#include <utility>

namespace linserve {

WorkPool::WorkPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

void WorkPool::Post(absl::AnyInvocable<void() &&> fn) {
  absl::MutexLock lock(&mu_);
  if (!stopped_) queue_.push_back(std::move(fn));
}

void WorkPool::Stop() {
  std::deque<absl::AnyInvocable<void() &&>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    dropped.swap(queue_);
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkPool::Run() {
  while (true) {
    absl::AnyInvocable<void() &&> fn;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkPool* pool) ABSL_SHARED_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopped_ || !pool->queue_.empty();
          },
          this));
      if (stopped_) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(fn)();
  }
}

}  // namespace linserve
