// Programmatic dependent launch (docs/architecture.md §2.2): every kernel of kernels/cuda is
// launched by LaunchDependent and begins with AfterPriorKernel. On Hopper and later the GPU may
// then schedule a kernel's blocks while the kernel before it in the stream is still running —
// once every block of that kernel has passed its own AfterPriorKernel — so a launch's latency,
// its blocks' start and the L2 prefetch of its weights (PrefetchToL2) overlap its predecessor
// instead of following it; each block then waits on the device for the predecessor to finish
// and its writes to be visible. A decode step at batch 1 is a chain of ~60 small dependent
// kernels (bench/results/gpu.md), each mostly launch and ramp, which is what this overlaps.
//
// The rule that keeps it correct: before AfterPriorKernel a kernel reads and writes no memory at
// all (a prefetch to L2 is only a hint: L2 is where device memory is coherent, so it can never
// return stale data). Its predecessor has then finished, and by induction every earlier kernel
// too. A copy, memset or cuBLASLt product between two kernels keeps the ordinary full ordering.
// The emulation (tests/gpu/emulation) checks that every thread of a dependent launch waits
// before it lets the next kernel start and before it ends.
#ifndef LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_
#define LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/dependent_launch.h"

namespace linserve::cuda {

// kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent of the kernel
// before it in `stream` where LaunchesAsDependent(stream). Errors surface as a <<<...>>> launch's
// do, through cudaGetLastError (LaunchStatus). (cudaLaunchKernelEx is cuda_runtime.h's, which
// nvcc includes in every .cu file; the emulation rewrites the calls of this function.)
template <typename... Params, typename... Args>
void LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                     cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute dependent;
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  // gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs.
  const cudaLaunchConfig_t config = {grid,   block,      shared,
                                     stream, &dependent, LaunchesAsDependent(stream) ? 1u : 0u};
  (void)cudaLaunchKernelEx(&config, kernel, args...);
}

// Run by every thread of a kernel that LaunchDependent launches, before it touches memory:
// waits until the kernel before it in the stream has finished and its writes are visible, then
// lets the next kernel's blocks be scheduled (they run up to their own AfterPriorKernel). Without
// a dependent launch both are no-ops.
__device__ __forceinline__ void AfterPriorKernel() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// A hint, so it may precede AfterPriorKernel: the L2 cache fetches the 128-byte lines of
// [p, p + bytes), thread `lane` of `lanes` taking every lanes-th line. For weights, which no
// kernel writes.
__device__ __forceinline__ void PrefetchToL2(const void* p, int64_t bytes, int lane, int lanes) {
#if defined(__CUDA_ARCH__)
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = first + static_cast<uintptr_t>(lane) * 128; line < end;
       line += static_cast<uintptr_t>(lanes) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
  }
#else
  (void)p, (void)bytes, (void)lane, (void)lanes;
#endif
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DEPENDENT_LAUNCH_CUH_
