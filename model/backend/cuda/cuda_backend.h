// CudaBackend: the Backend of model/backend/backend.h on one NVIDIA GPU, tested against CpuBackend.
//
// Memory, all allocated once at creation (an out-of-memory is a RESOURCE_EXHAUSTED from
// CreateCudaBackend naming the part that did not fit, never a crash later):
//   - weights in BackendOptions::weight_precision (auto: bf16; int8, a CPU format, is refused;
//     LayerNorm parameters, biases and the favor_plus projections stay fp32), q/k/v fused into
//     one [3·H·Dh, d_model] matrix;
//   - the state pool in BackendOptions::state_precision (fp32, or bf16 for models whose mixers
//     are all linear attention), slot_capacity() = min(max_slots, state_memory_budget_bytes /
//     state bytes per slot) slots, in StateBlob layout element for element: fork is a plain
//     copy, export/import plain copies of fp32 (a bf16 pool converts at ReadSlot / WriteSlot);
//   - per-slot sampler state for DecodeAndSample (vocab_size int32 seen-token counts, an
//     MT19937-64 and the parameters: about 4·vocab_size bytes per slot on top of the budget);
//     picks are made on the device (kernels/cuda/sampling.h): for the same logits and seed they
//     are the host Sampler's except when a cumulative sum lands within rounding of top_p or of
//     the draw. The logprobs of rows that ask for top_logprobs are computed on the device too
//     (kernels/cuda/logprobs.h): only tokens, and those rows' 1 + 2n numbers, cross PCIe;
//   - activations for max(max_batch_size, 2048) rows and the cuBLASLt workspace.
//   The LM head and embedding rows are padded to a multiple of 64 (logits_stride()), so the
//   head GEMM's leading dimensions stay 16-byte aligned for an odd vocabulary.
//
// Math: cuBLASLt GEMMs with fp32 accumulation over the whole batch (activations are rounded to
// the weight type on the way in), kernels from kernels/cuda for the rest. A decode step, with
// its sampling and the copies of its picks to pinned memory, is captured in a CUDA graph per
// sampling variant and batch-size bucket (powers of two up to max_batch_size; a batch is padded
// to its bucket with rows that touch no slot) the first time they are used, and replayed
// afterwards: one launch a step. BackendOptions::num_threads is not used.
//
// Asynchronous (Backend's pipelining): LaunchDecodeAndSample enqueues the step, the picks and
// their copy to pinned host memory on the backend's stream and returns; CollectSamples waits
// for the oldest step's event. Two steps may be in flight (launch-ahead): each stages through a
// pinned set of its own (cuda_workspace.h: PinnedStaging) and has graphs of its own,
// and a row's previous_row feeds the previous step's pick from the device (decode_picks, read
// by the embedding).
//
// Not thread-safe (one owner, as Backend says); any thread may be that owner: every call makes
// the backend's device current first.
//
// In parts: cuda_weights.h (the upload), cuda_workspace.h (every other allocation, checked as
// one plan), cuda_forward.h (embedding, the layer list, LM head) running the components of
// cuda_layer.h made by kind (cuda_linear_attention, cuda_taylor_linear_attention,
// cuda_layer_norm, cuda_ffn),
// prefill_passes.h (prompts in passes), device_sampler.h (picks and logprobs), decode_graphs.h
// (the graph buckets); cuda_backend.cc validates, keeps the slots and runs the steps.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "model/model.h"

namespace linserve {

struct CudaBackendOptions {
  // CUDA device ordinal, in [0, device count). Default: 0.
  int32_t device = 0;
  // Replay each decode step from a CUDA graph captured per sampling variant and batch-size
  // bucket; false launches every kernel every step (same results, bitwise). Default: true.
  bool use_cuda_graphs = true;
};

// Device memory held by a CudaBackend, by purpose.
struct CudaMemoryUse {
  int64_t weights_bytes = 0;
  int64_t state_pool_bytes = 0;
  int64_t sampler_bytes = 0;
  int64_t workspace_bytes = 0;
};

class CudaBackend : public Backend {
 public:
  virtual CudaMemoryUse memory_use() const = 0;
  // Floats from one row of the device logits to the next: vocab_size rounded up to a multiple of
  // 64, the rows of the LM head and embedding as stored (padded_vocab.h). The pad columns never
  // leave the device and are never sampled.
  virtual int64_t logits_stride() const = 0;
  // "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
  virtual std::string device_description() const = 0;
};

// UNAVAILABLE when there is no usable device, INVALID_ARGUMENT for options out of range
// (naming the field and its limit) or weight_precision int8, RESOURCE_EXHAUSTED when the weights, state pool, sampler
// state or workspace do not fit on the device. The backend copies what it needs from `model`.
absl::StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(
    const Model& model, const BackendOptions& options, const CudaBackendOptions& cuda_options = {});

// Tokens of one prefill pass through the layers under `options`: about 2048, a multiple of
// prefill_chunk_size; longer prompts are fed in such passes.
int CudaPrefillSegment(const BackendOptions& options);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_BACKEND_H_
