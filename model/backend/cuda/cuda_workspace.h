// CudaWorkspace: everything a CudaBackend allocates at creation besides the weights — the state
// pool, the per-slot sampler state, the activations of one pass through the layers, and a
// step's row inputs and samples, on the device and mirrored in pinned host memory (so that
// their copies are asynchronous and can be captured in a CUDA graph). One plan, checked
// against the device's free memory before anything is allocated: an out-of-memory names every
// part with its size instead of failing on the third cudaMalloc.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_WORKSPACE_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_WORKSPACE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"
#include "kernels/cuda/sampling.h"
#include "model/backend/backend.h"
#include "model/format/config.h"

namespace linserve {

// cuBLASLt's workspace: the Gemm owns it, the plan counts it with the activations.
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// The per-row inputs of a pass (token, position, slot, and for a decode step each row's source:
// the row of the previous decode step whose pick it feeds, -1 = its token), and a prefill
// pass's tables (kernels/cuda/prefill_pieces.h: at most a piece and a chunk per row), in pinned
// host memory or on the device.
struct RowInputs {
  int32_t* tokens = nullptr;
  int64_t* positions = nullptr;
  int32_t* slots = nullptr;
  int32_t* sources = nullptr;
  cuda::PrefillPiece* pieces = nullptr;
  cuda::PrefillChunk* chunks = nullptr;
};

// A step's samples as they cross PCIe, in pinned host memory and (same shape) on the device:
// a token per row and, only when some row asks for them, how many alternatives each row wants,
// the sampled token's logprob and the alternatives.
struct SampleBuffers {
  int32_t* tokens = nullptr;
  int32_t* top_n = nullptr;       // [rows]
  float* logprobs = nullptr;      // [rows]
  int32_t* top_ids = nullptr;     // [rows, kMaxTopLogprobs]
  float* top_logprobs = nullptr;  // [rows, kMaxTopLogprobs]
};

// A step's token masks (structured output) as they cross PCIe, in pinned host memory and (same
// shape) on the device, for up to max_batch_size sampled rows: the masks of the rows that have
// one, packed, and per row the index of its mask (-1 = none); see kernels/cuda/row_masks.h. Only
// a step with a masked row fills and uploads them.
struct MaskBuffers {
  uint32_t* words = nullptr;  // [max_batch_size, ceil(vocab / 32)]
  int32_t* index = nullptr;   // [max_batch_size]
};

// One pass's activations on the device, between the layer components; T is the weights' type.
struct Activations {
  float* x = nullptr;       // [rows, d] residual stream
  void* xt = nullptr;       // T [rows, d] next component's input (normalised / cast)
  float* proj = nullptr;    // [rows, d] a mixer's or MLP's output
  // [max_batch_size, logits_stride]: a row's first vocab_size columns are the logits, the rest
  // pad the row to an aligned stride and are never read (padded_vocab.h).
  float* logits = nullptr;
  int64_t logits_stride = 0;  // PaddedVocab(vocab_size)
};

// The layer components' own scratch, reserved before the workspace is allocated: numbered
// buffers per role, each as large as the largest request for it. The mixers share theirs (one
// runs at a time), and so do the MLPs.
enum class ScratchRole { kMixer, kMlp };
class ScratchPlan {
 public:
  void Reserve(ScratchRole role, int index, size_t bytes);
  const std::vector<size_t>& sizes(ScratchRole role) const {
    return sizes_[static_cast<size_t>(role)];
  }

 private:
  std::array<std::vector<size_t>, 2> sizes_;
};

// The pinned buffers a pass stages its inputs and samples through. There are two sets: a decode
// step stages through one while the step launched before it may still be reading the other
// (launch-ahead); every other pass uses set 0, once the steps in flight have finished.
struct PinnedStaging {
  RowInputs rows;
  SampleBuffers samples;
  MaskBuffers masks;
};
inline constexpr int kStagingSets = 2;
// Asynchronous slot reads (CudaBackend's StartReadSlot) in flight at once.
inline constexpr int kSlotReads = 4;
// Int32 entries of the device sampler's upload arena (CountArenaEntries): a vocabulary's dense
// counts fit, and prompts of up to this many tokens go in one piece.
inline constexpr int64_t kMinCountArenaEntries = 65536;
inline int64_t CountArenaEntries(int64_t vocab) { return std::max(vocab, kMinCountArenaEntries); }

struct CudaWorkspace {
  // Slot i's state, in StateBlob layout with each element in state_dtype (fp32, or bf16 with
  // --state_precision=bf16), at element i · StateFloatsPerSlot(). Fork is a plain copy; export
  // and import convert to and from the fp32 StateBlob when state_dtype is bf16.
  void* state = nullptr;
  cuda::DType state_dtype = cuda::DType::kF32;
  cuda::SamplerSlots sampler;
  Activations act;
  std::array<std::vector<void*>, 2> scratch;  // per ScratchRole, per index
  RowInputs device_rows;
  SampleBuffers device_samples;
  MaskBuffers device_masks;
  // The split argmax's partials and arrival counters (kernels/cuda/sampling.h), zeroed here.
  cuda::ArgmaxScratch argmax;
  // [max_batch_size]: the last decode step's picks, which the next step's launch-ahead rows read
  // (device_samples.tokens is overwritten by any sampling pass, a prefill's too).
  int32_t* decode_picks = nullptr;
  std::array<PinnedStaging, kStagingSets> staging;
  // kSlotReads slots' states each (a slot's bytes apart): where an asynchronous read stages the
  // slot on the device, and where it lands in pinned host memory.
  char* read_staging = nullptr;
  char* read_landing = nullptr;
  // CountArenaEntries(vocab) int32 each: the device sampler's uploads of tokens to count and of
  // dense seen counts, staged in pinned memory and copied in stream order (device_sampler.h).
  int32_t* count_staging = nullptr;  // pinned
  int32_t* count_upload = nullptr;   // device

  int64_t state_pool_bytes = 0;
  int64_t sampler_bytes = 0;
  int64_t activation_bytes = 0;  // with the GEMM workspace

  // The allocations the pointers above point into.
  cuda::DeviceBuffer state_buffer;
  cuda::DeviceBuffer sampler_buffer;
  cuda::DeviceBuffer activation_buffer;
  cuda::PinnedBuffer pinned;
};

// The scratch buffer `index` of `role` that a component reserved.
inline void* Scratch(const CudaWorkspace& workspace, ScratchRole role, int index) {
  return workspace.scratch[static_cast<size_t>(role)][static_cast<size_t>(index)];
}

// Allocates a workspace for `capacity` slots, passes of `rows` rows and the components'
// `scratch`. RESOURCE_EXHAUSTED when it does not fit in what
// `device` (its description) has free after the weights (`weights_bytes`), naming the options
// that size it.
// The element type of the state pool: fp32, or bf16 for StatePrecision::kBf16.
cuda::DType StateDType(StatePrecision precision);

absl::StatusOr<CudaWorkspace> AllocateWorkspace(const ModelConfig& config,
                                                const BackendOptions& options, int32_t capacity,
                                                int rows, const ScratchPlan& scratch,
                                                cuda::DType dtype, absl::string_view device,
                                                int64_t weights_bytes);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_WORKSPACE_H_
