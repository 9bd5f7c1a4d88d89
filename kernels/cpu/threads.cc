#include "kernels/cpu/threads.h"

#include <cblas.h>
#include <thread>

#include <algorithm>

namespace linserve::cpu {

int AvailableCores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int ResolveNumThreads(int requested) { return requested > 0 ? requested : AvailableCores(); }

int ThreadsForWork(int num_threads, int64_t work) {
  return static_cast<int>(
      std::clamp<int64_t>(work / kMinWorkPerThread, 1, std::max(1, num_threads)));
}

void SetBlasThreads(int num_threads) { openblas_set_num_threads(std::max(1, num_threads)); }

}  // namespace linserve::cpu
