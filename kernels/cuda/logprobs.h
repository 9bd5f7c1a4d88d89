// Logprobs on the device: for the decode rows that ask for them, the sampled token's log
// probability and the n most likely tokens, under the temperature-free distribution (the
// log-softmax of the logits as the LM head wrote them, before penalties, over the tokens of the
// row's mask when it has one: a disallowed token's logprob is -inf), so that a request for
// top_logprobs costs (1 + 2n) numbers per row across PCIe instead of a vocabulary of logits.
// Follows model/backend/sampler.h's LogProbOf and TopLogprobsInto: the partition function in double
// from the row's maximum, alternatives most likely first with ties to the lowest id; values
// equal the host's up to the order of the double sum.
#ifndef LINSERVE_KERNELS_CUDA_LOGPROBS_H_
#define LINSERVE_KERNELS_CUDA_LOGPROBS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/row_masks.h"

namespace linserve::cuda {

struct TopLogprobsArgs {
  const float* logits = nullptr;    // [rows, logits_stride]: the first vocab columns are read
  const int32_t* tokens = nullptr;  // [rows]: each row's sampled token
  const int32_t* top_n = nullptr;   // [rows]: alternatives wanted, in [0, max_top]; 0 skips the row
  int rows = 0;
  int vocab = 0;
  // Floats from one row of logits to the next, 0 or >= vocab. Default: 0, meaning vocab.
  int64_t logits_stride = 0;
  int max_top = 0;                // stride of the alternatives, per row
  RowMasks masks;                 // as the sample kernel's
  float* logprobs = nullptr;      // [rows] out: log p(tokens[r]) for rows with top_n > 0
  int32_t* top_ids = nullptr;     // [rows, max_top] out: the first top_n[r] entries
  float* top_logprobs = nullptr;  // [rows, max_top] out
};
absl::Status LaunchTopLogprobs(cudaStream_t stream, const TopLogprobsArgs& args);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_LOGPROBS_H_
