// PaddedVocab: the CUDA backend stores the LM head and the embedding with their vocabulary rows
// padded to a multiple of kVocabRowPadding (pad rows zero), and the logits with that row stride.
// Why: a row stride of an odd vocabulary (GPT-2's 50257) is not 16-byte aligned, and cuBLASLt then
// falls back to a slow alignment-1 kernel for the LM head (issue 29: 214 µs instead of ~28 µs at
// batch 256 on an H100). The pad columns of the logits are never read: the sampler, logprobs,
// masks, penalties and every copy to the host take only the first vocab_size columns of a row.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_PADDED_VOCAB_H_
#define LINSERVE_MODEL_BACKEND_CUDA_PADDED_VOCAB_H_

#include <cstdint>

namespace linserve {

// 64 rows: 256 bytes of fp32 logits, 128 of bf16 weights, so every element type's row stride is
// a multiple of 16 bytes (and of cuBLASLt's tile widths).
inline constexpr int64_t kVocabRowPadding = 64;

// vocab rounded up to a multiple of kVocabRowPadding; vocab >= 1.
constexpr int64_t PaddedVocab(int64_t vocab) {
  return (vocab + kVocabRowPadding - 1) / kVocabRowPadding * kVocabRowPadding;
}

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_PADDED_VOCAB_H_
