// The pool behind ParallelFor. One job runs at a time (a mutex taken with try_lock: a concurrent
// caller runs inline rather than queueing). A job lives in a shared_ptr, so a helper that wakes
// late may still hold it safely: it can only claim an index past the end and leave. The caller
// waits on the count of *finished* tasks, never on the helpers.
#include "kernels/cpu/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace linserve::cpu {
namespace {

// Spin iterations (each one _mm_pause, tens of cycles) before an idle helper sleeps: long
// enough to bridge the gaps between the parallel loops of one decode step.
constexpr int kIdleSpins = 1 << 14;

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();  // never destroyed: helpers may outlive static destructors
    return *pool;
  }

  // False when another job is running: the caller then runs its tasks itself.
  bool TryRun(int participants, int64_t tasks, TaskFn fn, const void* context) {
    std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    while (static_cast<int>(helpers_.size()) < participants - 1) {
      helpers_.emplace_back([this] { HelperLoop(); });
    }
    auto job = std::make_shared<Job>();
    job->fn = fn;
    job->context = context;
    job->tasks = tasks;
    job->helpers = participants - 1;
    {
      std::lock_guard<std::mutex> publish(job_mu_);
      job_ = job;
    }
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    RunTasks(*job, 0);
    for (int spins = 0; job->done.load(std::memory_order_acquire) < tasks; ++spins) {
      // A helper is inside its last task; if it was descheduled, give it the core.
      if (spins < kIdleSpins) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
    {
      std::lock_guard<std::mutex> retire(job_mu_);
      job_ = nullptr;
    }
    return true;
  }

 private:
  struct Job {
    TaskFn fn = nullptr;
    const void* context = nullptr;
    int64_t tasks = 0;
    int helpers = 0;                  // helpers allowed to join
    std::atomic<int> joined{0};       // helpers that did
    std::atomic<int64_t> next{0};     // next unclaimed task
    std::atomic<int64_t> done{0};     // finished tasks
  };

  static void RunTasks(Job& job, int participant) {
    for (;;) {
      const int64_t task = job.next.fetch_add(1, std::memory_order_relaxed);
      if (task >= job.tasks) return;
      job.fn(job.context, task, participant);
      job.done.fetch_add(1, std::memory_order_release);
    }
  }

  void HelperLoop() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      for (int spins = 0; spins < kIdleSpins && generation_.load(std::memory_order_acquire) == seen;
           ++spins) {
        _mm_pause();
      }
      generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> take(job_mu_);
        job = job_;
      }
      if (job == nullptr) continue;
      const int slot = job->joined.fetch_add(1, std::memory_order_relaxed);
      if (slot < job->helpers) RunTasks(*job, slot + 1);
    }
  }

  std::mutex run_mu_;
  std::vector<std::thread> helpers_;  // guarded by run_mu_
  std::mutex job_mu_;  // taken once per job by the caller and by each helper, never per task
  std::shared_ptr<Job> job_;  // guarded by job_mu_
  std::atomic<uint64_t> generation_{0};
};

}  // namespace

void ParallelForImpl(int num_threads, int64_t tasks, TaskFn fn, const void* context) {
  if (tasks <= 0) return;
  const int participants = static_cast<int>(std::min<int64_t>(num_threads, tasks));
  if (participants > 1 && Pool::Get().TryRun(participants, tasks, fn, context)) return;
  for (int64_t task = 0; task < tasks; ++task) fn(context, task, 0);
}

}  // namespace linserve::cpu
