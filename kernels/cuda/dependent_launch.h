// Programmatic dependent launch, host side (dependent_launch.cuh has the launch and the device
// side): whether the kernels of kernels/cuda launch as programmatic dependents of the kernel
// before them in their stream. Process-wide, read at each launch, so it applies to the launches
// (and graph captures) made after it is set; gpu_bench turns it off to measure its effect.
#ifndef LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_H_
#define LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_H_

#include <cuda_runtime_api.h>

namespace linserve::cuda {

// Default: true. False launches every kernel only after the one before has finished, as a
// <<<...>>> launch does (the same results, bitwise).
void SetDependentLaunch(bool enabled);
bool DependentLaunchEnabled();

// Whether a kernel launched on `stream` now launches as a programmatic dependent: while enabled,
// on every stream but the legacy default one (nullptr), which synchronises with all the others
// and keeps plain launches.
bool LaunchesAsDependent(cudaStream_t stream);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_H_
