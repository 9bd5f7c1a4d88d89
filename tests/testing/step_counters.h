// StepCounters: what linserve-serving-loop-bench reads of a backend while the engine drives it,
// from any thread (relaxed atomics: figures, not synchronisation). InstantBackend and
// DeviceClockBackend count into one each.
#ifndef LINSERVE_TESTS_TESTING_STEP_COUNTERS_H_
#define LINSERVE_TESTS_TESTING_STEP_COUNTERS_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace linserve {

class StepCounters {
 public:
  // A decode step of `rows` rows completed, having taken `nanos` (what that is: the backend's).
  void CountStep(int32_t rows, int64_t nanos) {
    steps_.fetch_add(1, std::memory_order_relaxed);
    rows_.fetch_add(rows, std::memory_order_relaxed);
    last_batch_.store(rows, std::memory_order_relaxed);
    nanos_.fetch_add(nanos, std::memory_order_relaxed);
  }
  // Records the calling thread's CPU-time clock, the first time only (the engine thread's, when
  // the backend calls it from its decode launch).
  void NoteCaller() {
    if (has_caller_clock_.load(std::memory_order_relaxed)) return;
    if (pthread_getcpuclockid(pthread_self(), &caller_clock_) == 0) {
      has_caller_clock_.store(true, std::memory_order_release);
    }
  }

  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }
  int64_t rows() const { return rows_.load(std::memory_order_relaxed); }
  // Rows of the latest step.
  int32_t last_batch() const { return last_batch_.load(std::memory_order_relaxed); }
  int64_t nanos() const { return nanos_.load(std::memory_order_relaxed); }
  bool has_caller_clock() const { return has_caller_clock_.load(std::memory_order_acquire); }
  clockid_t caller_clock() const { return caller_clock_; }

 private:
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> rows_{0};
  std::atomic<int32_t> last_batch_{0};
  std::atomic<int64_t> nanos_{0};
  std::atomic<bool> has_caller_clock_{false};
  clockid_t caller_clock_{};
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_STEP_COUNTERS_H_
