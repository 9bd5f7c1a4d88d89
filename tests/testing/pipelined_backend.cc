#include "tests/testing/pipelined_backend.h"

#include <utility>

namespace linserve {

void PipelinedBackend::RunLaunched() const {
  if (launched_.has_value() && !launched_->outcome.has_value()) {
    launched_->outcome = inner_->DecodeAndSample(launched_->batch, launched_->out);
  }
}

absl::Status PipelinedBackend::LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                                     const SampleOutput& out) {
  if (launched_.has_value()) {
    return absl::FailedPreconditionError(
        "LaunchDecodeAndSample: a step is in flight; collect it first");
  }
  launched_ = Launched{.batch = {batch.begin(), batch.end()}, .out = out, .outcome = {}};
  return absl::OkStatus();
}

absl::Status PipelinedBackend::CollectSamples() {
  if (!launched_.has_value()) {
    return absl::FailedPreconditionError("CollectSamples: no step is in flight");
  }
  RunLaunched();
  absl::Status outcome = *launched_->outcome;
  launched_.reset();
  return outcome;
}

absl::StatusOr<SlotId> PipelinedBackend::AllocateSlot() {
  RunLaunched();
  return inner_->AllocateSlot();
}

void PipelinedBackend::FreeSlot(SlotId slot) {
  RunLaunched();
  inner_->FreeSlot(slot);
}

absl::Status PipelinedBackend::ResetSlot(SlotId slot) {
  RunLaunched();
  return inner_->ResetSlot(slot);
}

absl::Status PipelinedBackend::CopySlot(SlotId from, SlotId to) {
  RunLaunched();
  return inner_->CopySlot(from, to);
}

absl::StatusOr<int64_t> PipelinedBackend::SlotPosition(SlotId slot) const {
  RunLaunched();
  return inner_->SlotPosition(slot);
}

absl::Status PipelinedBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                       absl::Span<float> logits) {
  RunLaunched();
  return inner_->Prefill(slot, tokens, logits);
}

absl::Status PipelinedBackend::Decode(absl::Span<const DecodeItem> batch,
                                      absl::Span<float> logits) {
  RunLaunched();
  return inner_->Decode(batch, logits);
}

absl::Status PipelinedBackend::StartSampling(SlotId slot, const SamplingParams& params,
                                             int32_t top_logprobs,
                                             absl::Span<const TokenId> observed) {
  RunLaunched();
  return inner_->StartSampling(slot, params, top_logprobs, observed);
}

absl::Status PipelinedBackend::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  RunLaunched();
  return inner_->SetSeenCounts(slot, counts);
}

absl::Status PipelinedBackend::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                               const SampleOutput& out) {
  RunLaunched();
  return inner_->DecodeAndSample(batch, out);
}

absl::Status PipelinedBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                                const SampleOutput& out,
                                                const uint32_t* allowed_tokens) {
  RunLaunched();
  return inner_->PrefillAndSample(slot, tokens, out, allowed_tokens);
}

absl::Status PipelinedBackend::PrefillBatch(absl::Span<const PrefillItem> batch,
                                            const SampleOutput& out) {
  RunLaunched();
  return inner_->PrefillBatch(batch, out);
}

absl::Status PipelinedBackend::ReadSlot(SlotId slot, StateBlob& out) const {
  RunLaunched();
  return inner_->ReadSlot(slot, out);
}

absl::Status PipelinedBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  RunLaunched();
  return inner_->WriteSlot(slot, in);
}

}  // namespace linserve
