// ParallelFor: the one thread pool of kernels/cpu.
//
// Tasks are claimed one at a time from a shared counter, and the caller returns as soon as every
// task has *finished* — it never waits for a helper thread that has not started. On a machine
// whose cores are shared (other processes, the server's own RPC threads), a helper that is not
// scheduled therefore costs nothing: the caller runs the remaining tasks itself, where a
// fork-join team with a static split (OpenMP's) would stall at its barrier until the helper got
// a time slice. Idle helpers spin briefly (a decode step issues its parallel loops back to back)
// and then sleep on a futex.
#ifndef LINSERVE_KERNELS_CPU_PARALLEL_H_
#define LINSERVE_KERNELS_CPU_PARALLEL_H_

#include <cstdint>

namespace linserve::cpu {

using TaskFn = void (*)(const void* context, int64_t task, int participant);

// Type-erased form of ParallelFor.
void ParallelForImpl(int num_threads, int64_t tasks, TaskFn fn, const void* context);

// Calls fn(task, participant) exactly once for every task in [0, tasks) and returns when all
// calls have returned. At most `num_threads` threads take part, the caller included;
// `participant` in [0, num_threads) is unique among the threads running one ParallelFor (per-
// thread scratch), but which participant runs which task varies from call to call, so results
// must not depend on it. Safe to call from several threads at once: a call that finds the pool
// busy runs all its tasks on the calling thread. fn must not call ParallelFor.
template <class F>
void ParallelFor(int num_threads, int64_t tasks, const F& fn) {
  ParallelForImpl(
      num_threads, tasks,
      [](const void* context, int64_t task, int participant) {
        (*static_cast<const F*>(context))(task, participant);
      },
      &fn);
}

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_PARALLEL_H_
