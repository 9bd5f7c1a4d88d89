// KernelAccount: what each kernel of one CUDA decode step (or one prefill) must move and compute,
// for a model shape and a batch (or a prompt): the floor each kernel's measured time is read
// against (issues 29 and 40). Per kernel, summed over the layers and launches of one step of
// `batch` rows (or one session's prefill of `tokens` rows):
//   bytes   weights (matrices in the weights' type, read once per step: a GEMM's w, the rows the
//           embedding gathers), state (fp32, each session's slice read and what the step
//           rewrites), activations (fp32 or weight-type tensors between kernels, each read once
//           and written once), logits (fp32, the LM head's output and the sampler's input);
//   flops   GEMMs 2·m·n·k; the mixers' state update and read-out as multiply-adds × 2 (plus the
//           z update and φᵀz read-out of the linear attentions); elementwise kernels (norms,
//           activations, gates, embedding, sampling) 0, as they are bound by their bytes.
// Vectors (biases, norm gains, a step's token ids and positions) are not counted: under 0.1% of a
// step's bytes at every shape here. The LM head counts the real vocabulary (the CUDA backend's
// padding to a multiple of 64, model/backend/cuda/padded_vocab.h, is overhead against this floor).
#ifndef LINSERVE_BENCH_GPU_KERNEL_ACCOUNT_H_
#define LINSERVE_BENCH_GPU_KERNEL_ACCOUNT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/format/config.h"

namespace linserve {

struct KernelBytes {
  int64_t weights = 0;
  int64_t state = 0;
  int64_t activations = 0;
  int64_t logits = 0;
  int64_t total() const { return weights + state + activations + logits; }
  friend bool operator==(const KernelBytes&, const KernelBytes&) = default;
};

struct KernelCost {
  std::string name;  // e.g. "gemm qkv", "linear_attention decode", "rms_norm (+ residual add)"
  // The CUDA kernels that run it, as a regular expression over a profile's kernel names (several
  // rows may share them, e.g. every norm runs AddNormKernel); empty for the cuBLASLt GEMMs.
  std::string cuda_kernels;
  int launches = 0;  // per step
  KernelBytes bytes;
  int64_t flops = 0;
};

// Rows up to which a step with 16-bit matrices runs what follows a projection whose input width is
// a multiple of kFusedEpilogueKMultiple in the projection's own kernel
// (kernels/cuda/small_batch_linear.h's kSmallBatchLinearMaxRows and kSmallBatchLinearKMultiple;
// gpu_bench asserts they agree): the account then has no "bias + activation" / "bias + gate" row
// ("gemm fc1" writes the hidden rows in the weights' type instead of fp32 products), and the
// residual add + norm after a mixer or MLP is counted in its output GEMM's row ("gemm o",
// "gemm fc2", ...: bytes, no launch). At every batch a pre-norm model's first norm is in the
// embedding's row ("embedding + layer_norm"), whose kernel runs it.
inline constexpr int64_t kFusedEpilogueMaxRows = 4;
inline constexpr int64_t kFusedEpilogueKMultiple = 8;

// Prefill floors of one session's `tokens` tokens of `config`, fed in passes of at most
// `pass_rows` rows (the CUDA backend's prefill segment) and chunks of `chunk` tokens, with
// matrices of `weight_element_bytes`: every projection a GEMM over all the tokens (its weights
// read once per pass), each mixer's prefill kernels one row (its state read and written once per
// pass; the linear attentions' FLOPs those of the chunked form, the recurrent kinds' their
// recurrence's per token, the sliding window's a full window per token), the norms, activations
// and embedding as in decode over `tokens` rows, and the LM head over the last token only (a
// prefill's logits). INVALID_ARGUMENT as DecodeKernelAccount, and for tokens, pass_rows or
// chunk < 1.
absl::StatusOr<std::vector<KernelCost>> PrefillKernelAccount(const ModelConfig& config,
                                                             int64_t tokens, int64_t pass_rows,
                                                             int64_t chunk,
                                                             int64_t weight_element_bytes);

// Decode step floors of `config` (whose layers ParseModelConfig filled in) at `batch` rows, with
// matrices of `weight_element_bytes` (2: bf16/fp16, 4: fp32), in the order the kernels first run.
// INVALID_ARGUMENT, naming the field, for batch < 1, an element size other than 2 or 4, or a
// layer kind the account does not know.
absl::StatusOr<std::vector<KernelCost>> DecodeKernelAccount(const ModelConfig& config,
                                                            int64_t batch,
                                                            int64_t weight_element_bytes);

// The sums over `account`.
KernelCost AccountTotal(const std::vector<KernelCost>& account);

}  // namespace linserve

#endif  // LINSERVE_BENCH_GPU_KERNEL_ACCOUNT_H_
