#include "kernels/cuda/dependent_launch.h"

#include <atomic>

namespace linserve::cuda {
namespace {

std::atomic<bool> g_dependent_launch{true};

}  // namespace

void SetDependentLaunch(bool enabled) { g_dependent_launch.store(enabled); }

bool DependentLaunchEnabled() { return g_dependent_launch.load(); }

bool LaunchesAsDependent(cudaStream_t stream) {
  return stream != nullptr && DependentLaunchEnabled();
}

}  // namespace linserve::cuda
