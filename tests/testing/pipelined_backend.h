// PipelinedBackend: makes any Backend asynchronous (Backend::asynchronous() is true), the way a
// device stream does, so that the engine's pipelined loop runs on every host: a launched step
// runs only when it is collected or when any other call arrives first (that call then acts on
// the backend as the step leaves it, as Backend's pipelining contract says), and its outcome is
// reported by CollectSamples.
//
// Not thread-safe, as Backend.
#ifndef LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_
#define LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_

#include <memory>
#include <optional>
#include <vector>

#include "model/backend/backend.h"

namespace linserve {

class PipelinedBackend final : public Backend {
 public:
  explicit PipelinedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

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

  bool asynchronous() const override { return true; }
  absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                     const SampleOutput& out) override;
  absl::Status CollectSamples() override;

 private:
  // Runs the launched step if it has not run yet.
  void RunLaunched() const;

  std::unique_ptr<Backend> inner_;
  // The launched step; `outcome` is set once it has run.
  struct Launched {
    std::vector<DecodeItem> batch;
    SampleOutput out;
    std::optional<absl::Status> outcome;
  };
  mutable std::optional<Launched> launched_;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_
