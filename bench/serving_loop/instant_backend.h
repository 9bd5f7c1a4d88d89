// InstantBackend: a Backend whose model costs nothing, for measuring the serving loop's own host
// cost (engine, transport) with no device time to hide behind: the serving-loop ceiling of
// issue 9.
//
// It keeps the whole Backend contract, with model/backend/slot_pool doing the bookkeeping and
// argument checks exactly as CpuBackend and CudaBackend do (so their per-step validation cost is
// part of what is measured), but its "model" is a function of (seed, position): the token picked at
// position p of a slot whose StartSampling seed is s is NextToken(s, p), a printable ASCII byte
// (32..126, so a byte tokenizer detokenizes every token to one character). The logits Decode
// and Prefill return put 30 on that token and 0 elsewhere, so greedy sampling of them picks it
// too; sampling parameters other than the seed do not change the pick, and penalty counts are
// checked and dropped. Under a token mask that excludes that token the pick is the lowest
// allowed id (what greedy sampling of the masked logits, all tied at 0, picks), reported as a
// one-hot pick too. A session's tokens therefore depend on its seed, position and masks only,
// alone or in any batch. The state is never materialised: ReadSlot returns zeros (a valid state).
//
// Not thread-safe, like every Backend, except counters(), which any thread may read.
#ifndef LINSERVE_BENCH_SERVING_LOOP_INSTANT_BACKEND_H_
#define LINSERVE_BENCH_SERVING_LOOP_INSTANT_BACKEND_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/backend/slot_pool.h"
#include "model/format/config.h"
#include "tests/testing/step_counters.h"

namespace linserve {

class InstantBackend final : public Backend {
 public:
  // `config` and `options` as for CreateCpuBackend; the slot count is SlotCapacity's.
  static absl::StatusOr<std::unique_ptr<InstantBackend>> Create(const ModelConfig& config,
                                                                const BackendOptions& options);

  // The token a slot seeded with `seed` picks at `position`: in [32, 127).
  static TokenId NextToken(uint64_t seed, int64_t position);

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
  absl::Status StartSampling(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                             absl::Span<const TokenId> observed) override;
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) override;
  absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                               const SampleOutput& out) override;
  absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                const SampleOutput& out, const uint32_t* allowed_tokens) override;
  absl::Status ReadSlot(SlotId slot, StateBlob& out) const override;
  absl::Status WriteSlot(SlotId slot, const StateBlob& in) override;

  // Successful DecodeAndSample calls: their rows, the wall time inside them (validation,
  // picks) and the CPU clock of the thread that made the first (the engine thread).
  const StepCounters& counters() const { return counters_; }

 private:
  struct SlotSampling {
    bool started = false;  // StartSampling since the slot was allocated, reset or written
    uint64_t seed = 0;
    int32_t top_logprobs = 0;
  };

  InstantBackend(const ModelConfig& config, const BackendOptions& options, int32_t capacity);
  TokenId Next(SlotId slot) const;
  void WriteLogits(SlotId slot, absl::Span<float> row) const;
  // Checks that `out` fits `slots` (FAILED_PRECONDITION for a slot with no StartSampling) and
  // that each row's mask (`masks`: one per row) allows a token, as HostSampling::CheckOutput does.
  absl::Status CheckOutput(absl::Span<const SlotId> slots, absl::Span<const uint32_t* const> masks,
                           const SampleOutput& out, const char* what) const;
  // Picks row `row` for `slot` (at its current position), among the tokens `mask` allows, into
  // `out`.
  void Pick(SlotId slot, const uint32_t* mask, size_t row, const SampleOutput& out) const;

  const ModelConfig config_;
  SlotPool pool_;
  std::vector<SlotSampling> sampling_;
  std::vector<SlotId> batch_slots_;           // sized once for max_batch_size rows
  std::vector<const uint32_t*> batch_masks_;  // the rows' token masks, likewise

  StepCounters counters_;
};

}  // namespace linserve

#endif  // LINSERVE_BENCH_SERVING_LOOP_INSTANT_BACKEND_H_
