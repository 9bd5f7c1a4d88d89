// The emulation's launch log: how many times each kernel has run in this process (a graph
// replay runs its kernels again), how many operations the host enqueued itself, and how many
// times the host waited for the device. Tests
// compiled for the emulation (LINSERVE_CUDA_EMULATION, set by run.sh) use it to assert which
// kernels a step launches; a real GPU build has no log.
#ifndef LINSERVE_TESTS_GPU_EMULATION_LAUNCH_LOG_H_
#define LINSERVE_TESTS_GPU_EMULATION_LAUNCH_LOG_H_

#include <cstdint>
#include <map>
#include <string>

namespace emu {

// Runs of the kernel named `kernel` (its name as written at the launch) so far.
int64_t KernelRuns(const char* kernel);
// Runs of every kernel that has run so far, by name.
std::map<std::string, int64_t> KernelRunCounts();
// Runs so far of kernels launched as programmatic dependents (kernels/cuda/dependent_launch.cuh).
int64_t DependentKernelRuns();
// Operations the host put on a stream itself so far, outside a capture: each kernel launch,
// copy, memset and matmul, and each graph launch as one (whatever the graph holds).
int64_t HostEnqueues();
// Times the host waited for the device so far (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize).
int64_t HostWaits();

}  // namespace emu

#endif  // LINSERVE_TESTS_GPU_EMULATION_LAUNCH_LOG_H_
