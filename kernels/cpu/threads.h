// Thread counts for the CPU kernels. All parallelism in kernels/cpu goes through ParallelFor
// (parallel.h) with an explicit thread count per call; OpenBLAS is kept single-threaded
// (SetBlasThreads(1)) by callers that invoke it from inside those loops, so the two pools never
// oversubscribe the cores.
#ifndef LINSERVE_KERNELS_CPU_THREADS_H_
#define LINSERVE_KERNELS_CPU_THREADS_H_

#include <cstdint>

namespace linserve::cpu {

// Cores available to this process (at least 1).
int AvailableCores();

// `requested` > 0 is returned as is; 0 means AvailableCores().
int ResolveNumThreads(int requested);

// Threads worth starting for `work` multiply-adds: at most `num_threads`, and one per
// kMinWorkPerThread, because handing tasks to other threads costs microseconds — tiny models
// and tiny batches run faster inline.
inline constexpr int64_t kMinWorkPerThread = int64_t{1} << 15;
int ThreadsForWork(int num_threads, int64_t work);

// Threads OpenBLAS may use for one call (process-wide OpenBLAS setting).
void SetBlasThreads(int num_threads);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_THREADS_H_
