// WorkPool: threads running closures posted from an event loop, for work too slow for the loop
// itself (the OpenAI API parses request bodies and tokenizes prompts there).
#ifndef LINSERVE_SERVER_TRANSPORT_WORK_POOL_H_
#define LINSERVE_SERVER_TRANSPORT_WORK_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace linserve {

// Stop drops what has not started.
class WorkPool {
 public:
  explicit WorkPool(int threads);
  ~WorkPool() { Stop(); }
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Dropped once stopped.
  void Post(absl::AnyInvocable<void() &&> fn);
  // Joins the threads once the closures running finish. Idempotent.
  void Stop();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_WORK_POOL_H_
