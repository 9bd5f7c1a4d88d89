// One block per row. The partition function is one max- and one sum-reduction over the row;
// the n alternatives are n arg-max reductions, each over the tokens ordered after the previous
// pick in the order (logit descending, id ascending), so nothing is sorted or marked and n <= 20
// passes over a row of the vocabulary cost less than a copy of it to the host. Under a mask a
// disallowed token's logit reads as -inf: it adds nothing to the partition function and comes
// after every allowed token, by id.
#include <cfloat>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/logprobs.h"
#include "kernels/cuda/row_masks.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;

// A candidate of the arg-max: (logit, id), better when larger, ties to the lower id; id < 0 is
// "none".
struct Candidate {
  float value;
  int id;
};

__device__ __forceinline__ bool Better(Candidate a, Candidate b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Ordered strictly after `previous` (in the order above): eligible for the next pick.
__device__ __forceinline__ bool After(float value, int id, Candidate previous) {
  return previous.id < 0 || value < previous.value || (value == previous.value && id > previous.id);
}

__device__ Candidate BlockBest(Candidate c, Candidate* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Candidate other;
    other.value = __shfl_xor_sync(0xffffffffu, c.value, offset);
    other.id = __shfl_xor_sync(0xffffffffu, c.id, offset);
    if (Better(other, c)) c = other;
  }
  __syncthreads();  // scratch may still be read by the previous reduction
  if (lane == 0) scratch[warp] = c;
  __syncthreads();
  c = lane < warps ? scratch[lane] : Candidate{0.0f, -1};
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Candidate other;
    other.value = __shfl_xor_sync(0xffffffffu, c.value, offset);
    other.id = __shfl_xor_sync(0xffffffffu, c.id, offset);
    if (Better(other, c)) c = other;
  }
  return c;
}

__global__ void TopLogprobsKernel(TopLogprobsArgs args) {
  AfterPriorKernel();
  __shared__ float float_scratch[32];
  __shared__ double double_scratch[32];
  __shared__ Candidate candidate_scratch[32];
  const int row = blockIdx.x;
  const int n = args.top_n[row];
  if (n <= 0) return;  // uniform over the block: no barrier is skipped by part of it
  const int64_t stride = args.logits_stride == 0 ? args.vocab : args.logits_stride;
  const float* row_logits = args.logits + static_cast<int64_t>(row) * stride;
  const uint32_t* mask = MaskOfRow(args.masks, row);
  // Token i's logit in the masked distribution.
  auto logit = [row_logits, mask](int i) {
    return MaskAllows(mask, i) ? row_logits[i] : -INFINITY;
  };

  float max_logit = -FLT_MAX;
  for (int i = threadIdx.x; i < args.vocab; i += blockDim.x) max_logit = fmaxf(max_logit, logit(i));
  max_logit = BlockMax(max_logit, float_scratch, -FLT_MAX);
  double sum = 0.0;
  for (int i = threadIdx.x; i < args.vocab; i += blockDim.x) {
    sum += exp(static_cast<double>(logit(i)) - static_cast<double>(max_logit));
  }
  sum = BlockSum(sum, double_scratch);
  const double log_z = static_cast<double>(max_logit) + log(sum);
  if (threadIdx.x == 0) {
    args.logprobs[row] = static_cast<float>(static_cast<double>(logit(args.tokens[row])) - log_z);
  }

  Candidate previous{0.0f, -1};
  for (int k = 0; k < n; ++k) {
    Candidate best{0.0f, -1};
    for (int i = threadIdx.x; i < args.vocab; i += blockDim.x) {
      const float value = logit(i);
      if (After(value, i, previous) && Better(Candidate{value, i}, best)) best = {value, i};
    }
    best = BlockBest(best, candidate_scratch);
    if (threadIdx.x == 0) {
      const int64_t at = static_cast<int64_t>(row) * args.max_top + k;
      args.top_ids[at] = best.id;
      args.top_logprobs[at] = static_cast<float>(static_cast<double>(best.value) - log_z);
    }
    previous = best;
  }
}

}  // namespace

absl::Status LaunchTopLogprobs(cudaStream_t stream, const TopLogprobsArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  if (args.vocab < 1 || args.max_top < 1) {
    return absl::InvalidArgumentError(absl::StrCat("top logprobs: vocab ", args.vocab,
                                                   " and max_top ", args.max_top, " must be >= 1"));
  }
  if (args.logits_stride != 0 && args.logits_stride < args.vocab) {
    return absl::InvalidArgumentError(absl::StrCat("top logprobs: logits_stride ",
                                                   args.logits_stride, " is neither 0 nor >= vocab ",
                                                   args.vocab));
  }
  LaunchDependent(TopLogprobsKernel, args.rows, kThreads, 0, stream, args);
  return LaunchStatus("TopLogprobsKernel", __FILE__, __LINE__);
}

}  // namespace linserve::cuda
