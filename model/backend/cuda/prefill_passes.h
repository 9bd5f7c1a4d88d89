// PrefillPasses: feeding prompts through CudaForward in passes of at most `segment` rows (about
// 2048 tokens, a multiple of the chunk size), so that the activations stay one fixed size
// whatever the prompt's length. A pass may hold several sessions' tokens (PrefillBatch, varlen):
// the GEMMs run over the whole pass, and so do the mixers' kernels, once per layer for every
// session (piece) of the pass, from the pass's tables (kernels/cuda/prefill_pieces.h). A
// session that goes on in the next pass is cut at a chunk boundary from its first token, so the
// chunked kernels see the same chunks as for the session fed alone.
//
// Each pass stages its row inputs and tables through the workspace's pinned buffers and waits
// for the stream before the next one refills them.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_PREFILL_PASSES_H_
#define LINSERVE_MODEL_BACKEND_CUDA_PREFILL_PASSES_H_

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/prefill_pieces.h"
#include "model/backend/backend.h"
#include "model/backend/cuda/cuda_forward.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/backend/slot_pool.h"

namespace linserve {

class PrefillPasses {
 public:
  // Keeps references to `forward`, `workspace` and `pool` (whose positions it reads and
  // advances).
  PrefillPasses(const ModelConfig& config, const BackendOptions& options, int segment,
                CudaForward& forward, const CudaWorkspace& workspace, SlotPool& pool);

  // Feeds `tokens` (validated) to `slot`. `all_logits` (host, n × vocab) or `last_logits`
  // (host, vocab) receive logits when non-null; with `last_on_device` the last position's
  // logits are left in logits row 0 (and the device row slots[0] is `slot`).
  absl::Status Feed(cudaStream_t stream, SlotId slot, absl::Span<const TokenId> tokens,
                    float* all_logits, float* last_logits, bool last_on_device);
  // Feeds every item (validated) and leaves the last position's logits of each sampling item
  // in the logits, one row each in batch order.
  absl::Status FeedBatch(cudaStream_t stream, absl::Span<const PrefillItem> batch);

 private:
  const int64_t vocab_;
  const int64_t head_rows_;  // rows of the logits buffer: max_batch_size
  const int64_t chunk_;
  const int segment_;
  CudaForward& forward_;
  const CudaWorkspace& ws_;
  SlotPool& pool_;
  // Stages the pass's tables (pinned set 0) and enqueues their upload; the tables on the device.
  absl::Status EnqueueTables(cudaStream_t stream, cuda::PrefillTables& tables) const;

  cuda::PrefillTableBuilder tables_;      // a pass's pieces, in row order
  std::vector<int> pending_head_rows_;    // a pass's rows whose logits a sampling item wants
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_PREFILL_PASSES_H_
