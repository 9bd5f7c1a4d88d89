// CpuBackend: the Backend of model/backend.h on the host, in fp32 — the source of truth every
// other backend is tested against.
//
// Memory: the weights are repacked once into the panel layout of kernels/cpu/packed_linear.h
// (as many bytes again as the model's projection and head weights); the state pool is one
// allocation of slot_capacity() · StateFloatsPerSlot() floats whose pages are only touched when
// a slot is first used; scratch for max(max_batch_size, prefill_chunk_size) rows.
//
// Threads: up to BackendOptions::num_threads threads (kernels/cpu/parallel.h) for the GEMMs and
// the per-(session, head) attention work; OpenBLAS is set single-threaded process-wide at
// creation because it is only called from inside those parallel loops.
#ifndef LINSERVE_MODEL_CPU_BACKEND_H_
#define LINSERVE_MODEL_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear_attention.h"
#include "kernels/cpu/packed_linear.h"
#include "model/backend.h"
#include "model/model.h"

namespace linserve {

class CpuBackend final : public Backend {
 public:
  // Checks `options` (errors name the field and its range) and packs the weights. `model` must
  // outlive the backend.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model,
                                                            const BackendOptions& options);

  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return config_; }
  int32_t slot_capacity() const override { return capacity_; }
  int32_t free_slots() const override { return static_cast<int32_t>(free_list_.size()); }

  absl::StatusOr<SlotId> AllocateSlot() override;
  void FreeSlot(SlotId slot) override;
  absl::Status ResetSlot(SlotId slot) override;
  absl::Status CopySlot(SlotId from, SlotId to) override;
  absl::StatusOr<int64_t> SlotPosition(SlotId slot) const override;

  absl::Status Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                       absl::Span<float> logits) override;
  absl::Status Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) override;

  absl::Status ReadSlot(SlotId slot, StateBlob& out) const override;
  absl::Status WriteSlot(SlotId slot, const StateBlob& in) override;

  int num_threads() const { return threads_; }

 private:
  struct PackedLayer {
    cpu::PackedMatrix q, k, v, o, fc1, fc2;
  };

  CpuBackend(const Model& model, const BackendOptions& options, int32_t capacity, int threads);

  float* SlotState(int32_t slot) { return states_.data() + slot * state_floats_; }
  const float* SlotState(int32_t slot) const { return states_.data() + slot * state_floats_; }
  // OK if `slot` names an allocated slot; else INVALID_ARGUMENT naming `what`.
  absl::Status CheckAllocated(SlotId slot, absl::string_view what) const;
  // OUT_OF_RANGE if a learned position table cannot cover positions [start, start + count).
  absl::Status CheckPositions(int64_t start, int64_t count, absl::string_view what) const;
  absl::Status CheckToken(TokenId token, absl::string_view what) const;

  // x_[row] = token embedding + position embedding.
  void Embed(int row, TokenId token, int64_t position);
  // Runs every layer over rows [0, rows) of x_. Attention: with `chunk_slot` >= 0 the rows are
  // consecutive tokens of that slot (chunked form); otherwise row i is one token of slot
  // decode_slots_[i] (recurrent form).
  void RunLayers(int rows, int32_t chunk_slot);
  // logits[i] for rows [first, first + rows) of x_, after the final norm (pre-norm models).
  void Head(int first, int rows, float* logits);
  void Attention(int layer, int rows, int32_t chunk_slot);

  const Model& model_;
  const ModelConfig& config_;
  const BackendOptions options_;
  const int32_t capacity_;
  const int threads_;
  const int64_t state_floats_;
  const int max_rows_;
  const cpu::AttentionShape shape_;
  const cpu::FeatureMap feature_map_;
  const cpu::Activation activation_;
  const std::vector<double> sinusoid_;  // denominators, sinusoidal positions only

  std::vector<PackedLayer> layers_;
  cpu::PackedMatrix head_;

  // Slot pool.
  cpu::FloatBuffer states_;
  std::vector<int64_t> positions_;
  std::vector<char> allocated_;
  std::vector<int32_t> free_list_;  // a stack; the lowest ids are handed out first
  std::vector<uint64_t> batch_mark_;  // duplicate detection in Decode
  uint64_t batch_generation_ = 0;

  // Scratch, max_rows_ rows each.
  cpu::FloatBuffer x_, h_, q_, k_, v_, phi_q_, phi_k_, attn_, ff_, chunk_scratch_;
  std::vector<int32_t> decode_slots_;  // per decode row: its slot
  std::vector<float*> layer_states_;   // per decode row: its slot's state for one layer
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_CPU_BACKEND_H_
