// SettlingBackend: a Backend over another whose decode steps it launches itself, and which brings
// those steps to their end (Settle) before it passes any other call through, so that the inner
// backend sees every call in the order the steps leave it, as Backend's pipelining contract
// says. The shape both asynchronous wrappers of the tests share: PipelinedBackend runs its
// launched steps in Settle, DeviceClockBackend waits there for its device thread. A subclass
// implements the launch, the collect and Settle.
//
// Its asynchronous reads land late, as a device's copy lands while the host goes on: a read is
// made at its start (after Settle), but handed over only by the second FinishedReads(false)
// after it (or by a FinishedReads(true)), so that every engine test finds where the engine
// needs a read landed but does not land it.
//
// Not thread-safe, as Backend.
#ifndef LINSERVE_TESTS_TESTING_SETTLING_BACKEND_H_
#define LINSERVE_TESTS_TESTING_SETTLING_BACKEND_H_

#include <memory>
#include <vector>

#include "model/backend/backend.h"

namespace linserve {

class SettlingBackend : public Backend {
 public:
  explicit SettlingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  DeviceKind device() const override { return inner_->device(); }
  const ModelConfig& config() const override { return inner_->config(); }
  int32_t slot_capacity() const override { return inner_->slot_capacity(); }
  int32_t free_slots() const override { return inner_->free_slots(); }
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
  absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) override;
  absl::Status ReadSlot(SlotId slot, StateBlob& out) const override;
  absl::Status WriteSlot(SlotId slot, const StateBlob& in) override;
  absl::StatusOr<int64_t> StartReadSlot(SlotId slot) override;
  std::vector<SlotRead> FinishedReads(bool wait) override;

  bool asynchronous() const override { return true; }

 protected:
  // Brings every launched step to its end; the inner backend may be called after.
  virtual void Settle() const = 0;
  Backend& inner() const { return *inner_; }

 private:
  const std::unique_ptr<Backend> inner_;
  struct LateRead {
    SlotRead read;
    int polls = 0;  // FinishedReads(false) calls since its start
  };
  std::vector<LateRead> reads_;  // started, not handed over; in start order
  int64_t next_ticket_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_SETTLING_BACKEND_H_
