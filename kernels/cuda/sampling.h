// On-device sampling: one token per decode row from the logits the LM head just wrote, so that
// only token ids cross PCIe. Greedy rows take a one-pass argmax (ArgmaxKernel, one block per
// row or, in a small batch, per segment of a row; ties to the lowest id as the host's fold); the
// other rows the full algorithm (SampleKernel), on a candidate set when it holds every cut. A row
// whose parameters apply no penalty never reads the seen counts, and one without logit biases never
// reads its biases. It implements model/backend/sampler.h's algorithm step for step (the token
// mask, logit biases, penalties, greedy, temperature, top-k, softmax, min-p, top-p, the inverse-CDF
// walk in ascending id order, one MT19937-64 draw per non-greedy call), in double like the host
// Sampler. Given the same logits and seed it returns the host Sampler's token except when a
// cumulative sum lands within rounding (~1e-16) of top_p or of the random draw, since sums are
// formed in a different order.
#ifndef LINSERVE_KERNELS_CUDA_SAMPLING_H_
#define LINSERVE_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/mt19937_64.h"
#include "kernels/cuda/row_masks.h"

namespace linserve::cuda {

// A sampled row's candidate set (sampling.cu): its allowed tokens whose tempered, penalised
// logit is at least the row's largest minus kSampleCandidateSpan, when there are at most
// kSampleCandidates of them and no logit is NaN. The filters and the draw run on the set when
// every cut provably lies inside it, on the whole row otherwise; the picks are the same.
inline constexpr int kSampleCandidates = 1024;
inline constexpr double kSampleCandidateSpan = 16.0;

// The fields of SamplingParams that shape the distribution (see model/backend/sampler.h).
struct DeviceSamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // How many of the slot's logit biases (SamplerSlots::biases) apply; 0: none is read.
  int32_t bias_count = 0;
};

// Most logit biases a slot holds (model/backend/sampler.h's kMaxLogitBias).
inline constexpr int kMaxDeviceLogitBias = 300;
// Int32 entries of one slot's logit biases: a bitmask of the biased tokens (bit t % 32 of word
// t / 32), then kMaxDeviceLogitBias token ids, ascending, then as many float biases (their
// bits), of which the first params.bias_count are the slot's.
LINSERVE_HOST_DEVICE inline int64_t LogitBiasEntries(int vocab) {
  return (static_cast<int64_t>(vocab) + 31) / 32 + 2 * kMaxDeviceLogitBias;
}

// Per-slot sampler state on the device. Row r of a launch uses slot slots[r]'s entries.
struct SamplerSlots {
  DeviceSamplingParams* params = nullptr;  // [slots]
  int32_t* seen_counts = nullptr;          // [slots, vocab]: times each token was seen
  Mt19937_64* rngs = nullptr;              // [slots]
  int32_t* biases = nullptr;               // [slots, LogitBiasEntries(vocab)]
};

// The argmax of a small batch's greedy rows splits each row over several blocks (sampling.cu):
// one block per row left all but one SM idle at batch 1 (23 µs for a 50k-token row on an H200,
// bench/results/gpu.md). Each block publishes its segment's fold in an ArgmaxPartial and the
// row's last block to arrive combines them.
inline constexpr int kMaxArgmaxSplits = 32;
// Most rows of a launch that may be split.
inline constexpr int kArgmaxSplitRows = 128;
struct ArgmaxPartial {
  double top;             // the segment's largest allowed non-NaN value
  int32_t top_id;         // the lowest id holding it; INT_MAX: none
  int32_t first_allowed;  // INT_MAX: none
};
struct ArgmaxScratch {
  ArgmaxPartial* partials = nullptr;  // [kArgmaxSplitRows, kMaxArgmaxSplits]
  uint32_t* arrivals = nullptr;       // [kArgmaxSplitRows]: zero before and after every launch
};
// Blocks per greedy row for a launch of `rows` rows over `vocab` logits: about 256 blocks in
// all, segments of at least 1024 ids, at most kMaxArgmaxSplits; 1 above kArgmaxSplitRows rows.
int ArgmaxSplits(int rows, int vocab);

struct SampleArgs {
  const float* logits = nullptr;   // [rows, logits_stride]: the first vocab columns are read
  // [rows], distinct; a negative slot is padding (a decode graph's bucket): no pick, no count
  const int32_t* slots = nullptr;
  SamplerSlots state;
  RowMasks masks;  // each masked row picks among the tokens its mask allows (at least one)
  int rows = 0;
  int vocab = 0;
  // Floats from one row of logits to the next, 0 or >= vocab (the CUDA backend's rows are padded,
  // model/backend/cuda/padded_vocab.h). Default: 0, meaning vocab (dense rows).
  int64_t logits_stride = 0;
  int32_t* tokens = nullptr;  // [rows] out (padding rows untouched); each pick counted as seen
  // Which kernels run: the argmax over the greedy rows (temperature 0), the draw over the
  // others; each skips the other's rows. False only when no row is of that kind (the rows'
  // temperatures, as the caller set them). Default: true.
  bool any_greedy = true;
  // Default: true.
  bool any_sampled = true;
  // Blocks per greedy row, 1 ..= kMaxArgmaxSplits (ArgmaxSplits' choice); above 1, needs
  // `argmax` and at most kArgmaxSplitRows rows. The picks are the same for every value.
  // Default: 1.
  int argmax_splits = 1;
  ArgmaxScratch argmax;
};
absl::Status LaunchSample(cudaStream_t stream, const SampleArgs& args);

// state.params[slot] = params and state.rngs[slot] seeded with `seed` (Mt19937_64::Seed), on
// the device: the arguments travel with the launch, so the host neither stages nor waits.
absl::Status LaunchStartSampling(cudaStream_t stream, const SamplerSlots& state, int32_t slot,
                                 const DeviceSamplingParams& params, uint64_t seed);

// seen_counts[slot, tokens[i]] += 1 for i < n (a prompt's tokens, for the penalties).
absl::Status LaunchCountTokens(cudaStream_t stream, const int32_t* tokens, int n, int vocab,
                               int32_t slot, int32_t* seen_counts);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_SAMPLING_H_
