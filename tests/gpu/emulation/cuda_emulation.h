// CPU emulation of the CUDA execution model, force-included (-include) into the .cu sources of
// kernels/cuda after translate_cu.py has rewritten their launches (LaunchDependent) into
// emu::Launch(...) calls. Each CUDA thread of a block is a fiber on one OS thread; fibers
// switch only at __syncthreads() and at warp shuffles, so shared memory and atomics need no
// locking. See README.md for what this does and does not check.
#ifndef LINSERVE_TESTS_GPU_EMULATION_CUDA_EMULATION_H_
#define LINSERVE_TESTS_GPU_EMULATION_CUDA_EMULATION_H_

// Before the CUDA headers, which define these only when they are not defined yet.
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

namespace emu {

// The running fiber's built-in variables.
extern dim3 g_thread_idx, g_block_idx, g_block_dim, g_grid_dim;

void SyncThreads();
// Every lane of the calling warp must arrive before any continues.
void SyncWarp();
// The block's dynamic shared memory (poisoned with 0xFF bytes, i.e. NaN floats, per block).
void* DynamicSharedMemory();
// Runs (or, while the stream is being captured, records) a launch of `kernel`: `body` once per
// thread of every block, counted in the launch log (launch_log.h) when it runs. Aborts on
// configurations CUDA would reject, and when a thread of a `dependent` launch (a programmatic
// dependent of the kernel before it) ends without having waited for that kernel.
void Launch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            std::function<void()> body, bool dependent = false);
// The running thread waits for the kernel before it (nothing to wait for: launches run one after
// another) / lets the next kernel start, which it may only do after it has waited.
void WaitForPriorKernel();
void LetNextKernelStart();
uint64_t* WarpExchange();

template <typename T>
T ShuffleFrom(T value, int source_lane, bool valid) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t* slots = WarpExchange();
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  slots[g_thread_idx.x & 31] = bits;
  SyncWarp();
  T out = value;
  if (valid) std::memcpy(&out, &slots[source_lane], sizeof(T));
  SyncWarp();  // nobody overwrites a slot before every lane has read
  return out;
}

}  // namespace emu

#define threadIdx (::emu::g_thread_idx)
#define blockIdx (::emu::g_block_idx)
#define blockDim (::emu::g_block_dim)
#define gridDim (::emu::g_grid_dim)

inline void __syncthreads() { ::emu::SyncThreads(); }
template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  return ::emu::ShuffleFrom(value, static_cast<int>((::emu::g_thread_idx.x & 31) ^ lane_mask),
                            true);
}
template <typename T>
T __shfl_up_sync(unsigned, T value, unsigned delta) {
  const int lane = static_cast<int>(::emu::g_thread_idx.x & 31);
  return ::emu::ShuffleFrom(value, lane - static_cast<int>(delta), lane >= static_cast<int>(delta));
}
// Fibers never switch inside an atomic, so a plain read-modify-write is atomic.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
// Blocks run one at a time, so every write is visible to the blocks after it.
inline void __threadfence() {}
// Programmatic dependent launch (kernels/cuda/dependent_launch.cuh), checked by the emulator.
inline void cudaGridDependencySynchronize() { ::emu::WaitForPriorKernel(); }
inline void cudaTriggerProgrammaticLaunchCompletion() { ::emu::LetNextKernelStart(); }
// The sources are compiled with -ffp-contract=off, so plain operators round each step.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline unsigned long long __double2ull_rn(double x) {
  return static_cast<unsigned long long>(std::nearbyint(x));
}
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
using std::fmax;
using std::fmin;
using std::max;
using std::min;
// nvcc's cuda_runtime.h overload for kernel pointers.
template <typename T>
cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

#endif  // LINSERVE_TESTS_GPU_EMULATION_CUDA_EMULATION_H_
