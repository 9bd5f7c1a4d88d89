#include "tests/testing/settling_backend.h"

namespace linserve {

absl::StatusOr<SlotId> SettlingBackend::AllocateSlot() {
  Settle();
  return inner_->AllocateSlot();
}

void SettlingBackend::FreeSlot(SlotId slot) {
  Settle();
  inner_->FreeSlot(slot);
}

absl::Status SettlingBackend::ResetSlot(SlotId slot) {
  Settle();
  return inner_->ResetSlot(slot);
}

absl::Status SettlingBackend::CopySlot(SlotId from, SlotId to) {
  Settle();
  return inner_->CopySlot(from, to);
}

absl::StatusOr<int64_t> SettlingBackend::SlotPosition(SlotId slot) const {
  Settle();
  return inner_->SlotPosition(slot);
}

absl::Status SettlingBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                      absl::Span<float> logits) {
  Settle();
  return inner_->Prefill(slot, tokens, logits);
}

absl::Status SettlingBackend::Decode(absl::Span<const DecodeItem> batch,
                                     absl::Span<float> logits) {
  Settle();
  return inner_->Decode(batch, logits);
}

absl::Status SettlingBackend::StartSampling(SlotId slot, const SamplingParams& params,
                                            int32_t top_logprobs,
                                            absl::Span<const TokenId> observed) {
  Settle();
  return inner_->StartSampling(slot, params, top_logprobs, observed);
}

absl::Status SettlingBackend::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  Settle();
  return inner_->SetSeenCounts(slot, counts);
}

absl::Status SettlingBackend::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                              const SampleOutput& out) {
  Settle();
  return inner_->DecodeAndSample(batch, out);
}

absl::Status SettlingBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                               const SampleOutput& out,
                                               const uint32_t* allowed_tokens) {
  Settle();
  return inner_->PrefillAndSample(slot, tokens, out, allowed_tokens);
}

absl::Status SettlingBackend::PrefillBatch(absl::Span<const PrefillItem> batch,
                                           const SampleOutput& out) {
  Settle();
  return inner_->PrefillBatch(batch, out);
}

absl::Status SettlingBackend::ReadSlot(SlotId slot, StateBlob& out) const {
  Settle();
  return inner_->ReadSlot(slot, out);
}

absl::Status SettlingBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  Settle();
  return inner_->WriteSlot(slot, in);
}

}  // namespace linserve
