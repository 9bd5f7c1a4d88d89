// CpuBackend: the Backend of model/backend/backend.h on the host, computing in fp32 — the source
// of truth every other backend is tested against (with its default, fp32 weights).
//
// The model runs as its list of layers (model/backend/cpu/cpu_layer.h: one object per mixer,
// norm and MLP, by kind); a slot's state is the layers' slices concatenated.
//
// Weights: every projection and the LM head are repacked once into the panel layout of
// kernels/cpu/packed_matrix.h in BackendOptions::weight_precision (auto: fp32; bf16, fp16, or
// int8 with a scale per 32 weights), which the kernels widen to fp32 as they stream it;
// embeddings, norms, biases, conv taps and the state stay fp32.
//
// Memory: the packed weights (fp32: as many bytes again as the model's projection and head
// weights; bf16/fp16: half that; int8: 1.125 bytes per weight); the state pool is one
// allocation of slot_capacity() · StateFloatsPerSlot() floats whose pages are only touched when
// a slot is first used; scratch for max(max_batch_size, kPrefillPassRows, prefill_chunk_size)
// rows.
//
// Prefill runs in passes of up to that many rows, each holding consecutive tokens of one or
// more sessions (PrefillBatch, varlen): the GEMMs run over all of a pass's rows, each mixer in
// one parallel loop over the pass's sessions (and heads), each session in chunks of
// prefill_chunk_size counted from the first token of its item (a one-token chunk runs the
// decode step); an item that goes on in the next pass is cut at such
// a chunk boundary. As every row of a GEMM is computed by the same instruction sequence
// (kernels/cpu/packed_linear.h), a session's state and logits are bitwise what it gets fed
// alone, whichever sessions share its passes: prefill is batch-invariant as decode is. (Where a
// prompt is split between calls does change the chunks, and so the rounding.)
//
// Threads: up to BackendOptions::num_threads threads (kernels/cpu/parallel.h) for the GEMMs and
// the per-(session, head) attention work; OpenBLAS is set single-threaded process-wide at
// creation because it is only called from inside those parallel loops.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_BACKEND_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/packed_linear.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/backend/host_sampling.h"
#include "model/backend/slot_pool.h"
#include "model/model.h"

namespace linserve {

class CpuBackend final : public Backend {
 public:
  // Checks `options` (errors name the field and its range; weight_precision against the model
  // file's weight_format: CpuWeightPrecision) and packs the weights. `model` must outlive the
  // backend.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model,
                                                            const BackendOptions& options);

  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return config_; }
  int32_t slot_capacity() const override { return pool_.capacity(); }
  int32_t free_slots() const override { return pool_.free_slots(); }

  absl::StatusOr<SlotId> AllocateSlot() override;
  void FreeSlot(SlotId slot) override;
  absl::Status ResetSlot(SlotId slot) override;
  absl::Status CopySlot(SlotId from, SlotId to) override;
  absl::StatusOr<int64_t> SlotPosition(SlotId slot) const override;

  absl::Status Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                       absl::Span<float> logits) override;
  absl::Status Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) override;

  // Sampling runs the host Sampler of model/backend/sampler.h on the logits, one row per task on the
  // backend's threads; logits never leave this backend's scratch.
  absl::Status StartSampling(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                             absl::Span<const TokenId> observed) override;
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) override;
  absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                               const SampleOutput& out) override;
  absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                const SampleOutput& out, const uint32_t* allowed_tokens) override;
  absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) override;

  absl::Status ReadSlot(SlotId slot, StateBlob& out) const override;
  absl::Status WriteSlot(SlotId slot, const StateBlob& in) override;

  int num_threads() const { return threads_; }

  // Rows of one prefill pass (at least; max_batch_size when larger).
  static constexpr int kPrefillPassRows = 512;

 private:
  CpuBackend(const Model& model, const BackendOptions& options, int32_t capacity, int threads);

  float* SlotState(int32_t slot) { return states_.data() + slot * state_floats_; }
  const float* SlotState(int32_t slot) const { return states_.data() + slot * state_floats_; }
  // Zeroes a slot's state and position and clears its sampling state.
  void ClearSlot(SlotId slot);
  // max_batch_size rows of logits for the sampling calls, allocated at first use.
  float* SampleLogits();

  // The prefill and decode bodies, after validation. RunPrefill writes to `logits` every
  // position's logits when `all_logits` (a batch of one item), else one row per item with
  // `sample`, in batch order.
  void RunPrefill(absl::Span<const PrefillItem> batch, bool all_logits, float* logits);
  void RunDecode(absl::Span<const DecodeItem> batch, float* logits);

  // x_[row] = token embedding + position embedding.
  void Embed(int row, TokenId token, int64_t position);
  // Runs every layer over rows [0, rows) of x_. Mixers: with `prefill` the rows are pieces_
  // (chunked form); otherwise row i is one token of slot decode_slots_[i] (recurrent form).
  void RunLayers(int rows, bool prefill);
  // logits[i] for rows [first, first + rows) of x_, after the final norm (pre-norm models).
  void Head(int first, int rows, float* logits);
  // logits[i] for row rows[i] of x_.
  void HeadRows(absl::Span<const int> rows, float* logits);

  const Model& model_;
  const ModelConfig& config_;
  const BackendOptions options_;
  const int threads_;
  const int64_t state_floats_;
  const int max_rows_;
  const std::vector<double> sinusoid_;  // denominators, sinusoidal positions only

  CpuWorkspace workspace_;  // the layers' scratch
  CpuLayers layers_;
  cpu::PackedMatrix head_;

  SlotPool pool_;
  cpu::FloatBuffer states_;
  HostSampling sampling_;
  cpu::FloatBuffer sample_logits_;
  std::vector<SlotId> sample_slots_;           // the slots of a DecodeAndSample batch
  std::vector<const uint32_t*> sample_masks_;  // and their token masks

  // The residual stream and the normed rows, max_rows_ rows each.
  cpu::FloatBuffer x_, h_;
  std::vector<int32_t> decode_slots_;  // per decode row: its slot
  std::vector<PrefillPiece> pieces_;   // the prefill pass's pieces, in row order
  std::vector<int> head_rows_;         // the prefill pass's rows whose logits are wanted
  std::vector<SlotId> prefill_slots_;  // the sampling items' slots of a PrefillBatch
  std::vector<const uint32_t*> prefill_masks_;  // and their token masks
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_BACKEND_H_
