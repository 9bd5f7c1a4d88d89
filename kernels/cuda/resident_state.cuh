// A head's recurrent state held in shared memory for one prefill piece. The delta rule's, gated
// linear attention's and Mamba-2's prefill kernels walk a piece's tokens one by one over the
// head's state (a k × v matrix, every element read and written per token); in global memory each
// token is a round trip of the whole matrix through L2. Where it fits, the block loads the state
// into shared memory once, runs every token there and stores it once: the same arithmetic on the
// same values (in the state's own element type, so a bf16 state still rounds per token), so the
// outputs and the state are bitwise what the global-memory walk gives.
#ifndef LINSERVE_KERNELS_CUDA_RESIDENT_STATE_CUH_
#define LINSERVE_KERNELS_CUDA_RESIDENT_STATE_CUH_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/shared_memory.cuh"

namespace linserve::cuda {

// The dynamic shared memory of a prefill block that needs `base` bytes of its own, with room for
// `elements` elements of `element_bytes` each after them when that fits in MaxBlockSharedBytes()
// (`*resident` true), else `base` alone (the block works on the state in global memory).
inline size_t PrefillSharedBytes(size_t base, int64_t elements, size_t element_bytes,
                                 bool* resident) {
  const size_t with_state = base + static_cast<size_t>(elements) * element_bytes;
  *resident = with_state <= MaxBlockSharedBytes();
  return *resident ? with_state : base;
}

// The state a piece's tokens work on: `room` (shared memory for `elements` elements) loaded from
// `state`, or `state` itself when there is no room (null) or no state (a padding piece: null).
// Both conditions are the block's, so every thread takes the same branch.
template <typename S>
__device__ __forceinline__ S* LoadResidentState(S* state, S* room, int64_t elements) {
  if (state == nullptr || room == nullptr) return state;
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) room[i] = state[i];
  __syncthreads();
  return room;
}

// Back to `state` after the piece, when LoadResidentState gave `working` in its place.
template <typename S>
__device__ __forceinline__ void StoreResidentState(S* state, const S* working, int64_t elements) {
  if (working == state) return;
  __syncthreads();  // every token's last writes
  for (int64_t i = threadIdx.x; i < elements; i += blockDim.x) state[i] = working[i];
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_RESIDENT_STATE_CUH_
