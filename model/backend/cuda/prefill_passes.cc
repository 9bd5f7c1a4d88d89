#include "model/backend/cuda/prefill_passes.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace linserve {

PrefillPasses::PrefillPasses(const ModelConfig& config, const BackendOptions& options, int segment,
                             CudaForward& forward, const CudaWorkspace& workspace, SlotPool& pool)
    : vocab_(config.vocab_size),
      head_rows_(options.max_batch_size),
      chunk_(options.prefill_chunk_size),
      segment_(segment),
      forward_(forward),
      ws_(workspace),
      pool_(pool),
      tables_(options.prefill_chunk_size) {}

absl::Status PrefillPasses::EnqueueTables(cudaStream_t s, cuda::PrefillTables& tables) const {
  const RowInputs& host = ws_.staging[0].rows;
  const RowInputs& dev = ws_.device_rows;
  const std::vector<cuda::PrefillPiece>& pieces = tables_.pieces();
  const std::vector<cuda::PrefillChunk>& chunks = tables_.chunks();
  std::copy(pieces.begin(), pieces.end(), host.pieces);
  std::copy(chunks.begin(), chunks.end(), host.chunks);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.pieces, host.pieces,
                                                pieces.size() * sizeof(cuda::PrefillPiece),
                                                cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.chunks, host.chunks,
                                                chunks.size() * sizeof(cuda::PrefillChunk),
                                                cudaMemcpyHostToDevice, s));
  tables = tables_.On(dev.pieces, dev.chunks);
  return absl::OkStatus();
}

absl::Status PrefillPasses::Feed(cudaStream_t s, SlotId slot, absl::Span<const TokenId> tokens,
                                 float* all_logits, float* last_logits, bool last_on_device) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t start = pool_.position(slot);
  const RowInputs& host = ws_.staging[0].rows;
  float* logits = ws_.act.logits;

  for (int64_t first = 0; first < n; first += segment_) {
    const int rows = static_cast<int>(std::min<int64_t>(segment_, n - first));
    for (int i = 0; i < rows; ++i) {
      host.tokens[i] = tokens[first + i];
      host.positions[i] = start + first + i;
      host.slots[i] = slot.value;
    }
    LINSERVE_RETURN_IF_ERROR(forward_.EnqueueRowInputs(s, rows, host, /*decode=*/false));
    tables_.Clear();
    tables_.Add(slot.value, rows);
    cuda::PrefillTables tables;
    LINSERVE_RETURN_IF_ERROR(EnqueueTables(s, tables));
    LINSERVE_RETURN_IF_ERROR(forward_.EnqueueLayers(s, rows, &tables));
    if (all_logits != nullptr) {
      for (int64_t r = 0; r < rows; r += head_rows_) {
        const int64_t m = std::min<int64_t>(head_rows_, rows - r);
        LINSERVE_RETURN_IF_ERROR(forward_.EnqueueHead(s, r, m, logits));
        LINSERVE_RETURN_IF_ERROR(
            forward_.EnqueueLogitsToHost(s, m, all_logits + (first + r) * vocab_));
      }
    } else if ((last_logits != nullptr || last_on_device) && first + rows == n) {
      LINSERVE_RETURN_IF_ERROR(forward_.EnqueueHead(s, rows - 1, 1, logits));
      if (last_logits != nullptr) {
        LINSERVE_RETURN_IF_ERROR(forward_.EnqueueLogitsToHost(s, 1, last_logits));
      }
    }
    // The pinned row inputs are refilled by the next segment.
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  }
  pool_.set_position(slot, start + n);
  return absl::OkStatus();
}

absl::Status PrefillPasses::FeedBatch(cudaStream_t s, absl::Span<const PrefillItem> batch) {
  const RowInputs& host = ws_.staging[0].rows;
  size_t item = 0;
  int64_t fed = 0;         // tokens of batch[item] in earlier passes
  int64_t logits_row = 0;  // the next sampling item's row of the logits
  while (item < batch.size()) {
    // Fill one pass with the next items' tokens, in order.
    tables_.Clear();
    pending_head_rows_.clear();
    int rows = 0;
    while (item < batch.size()) {
      const PrefillItem& it = batch[item];
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      const int64_t position = pool_.position(it.slot) + fed;
      int64_t take = std::min<int64_t>(n - fed, segment_ - rows);
      if (fed + take < n) {
        // The item goes on in the next pass: cut at a chunk boundary (segment_ is a multiple
        // of the chunk, so a fresh pass always takes some).
        take = (fed + take) / chunk_ * chunk_ - fed;
        if (take <= 0) break;
      }
      for (int64_t r = 0; r < take; ++r) {
        host.tokens[rows + r] = it.tokens[fed + r];
        host.positions[rows + r] = position + r;
        host.slots[rows + r] = it.slot.value;
      }
      tables_.Add(it.slot.value, static_cast<int32_t>(take));
      rows += static_cast<int>(take);
      fed += take;
      if (fed < n) break;
      if (it.sample) pending_head_rows_.push_back(rows - 1);
      ++item;
      fed = 0;
    }
    LINSERVE_RETURN_IF_ERROR(forward_.EnqueueRowInputs(s, rows, host, /*decode=*/false));
    cuda::PrefillTables tables;
    LINSERVE_RETURN_IF_ERROR(EnqueueTables(s, tables));
    LINSERVE_RETURN_IF_ERROR(forward_.EnqueueLayers(s, rows, &tables));
    // The LM head of each sampling item's last row, into the next row of the logits.
    for (int row : pending_head_rows_) {
      LINSERVE_RETURN_IF_ERROR(
          forward_.EnqueueHead(s, row, 1, ws_.act.logits + logits_row * ws_.act.logits_stride));
      ++logits_row;
    }
    // The pinned row inputs are refilled by the next pass.
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  }
  for (const PrefillItem& it : batch) {
    pool_.Advance(it.slot, static_cast<int64_t>(it.tokens.size()));
  }
  return absl::OkStatus();
}

}  // namespace linserve
