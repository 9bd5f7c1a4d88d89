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

absl::StatusOr<int64_t> SettlingBackend::StartReadSlot(SlotId slot) {
  Settle();
  // The inner backend's read, landed at once, then held back here.
  absl::StatusOr<int64_t> inner = inner_->StartReadSlot(slot);
  if (!inner.ok()) return inner.status();
  for (SlotRead& read : inner_->FinishedReads(/*wait=*/true)) {
    reads_.push_back(
        LateRead{.read = SlotRead{.ticket = next_ticket_, .state = std::move(read.state)}});
  }
  return next_ticket_++;
}

std::vector<Backend::SlotRead> SettlingBackend::FinishedReads(bool wait) {
  for (LateRead& late : reads_) ++late.polls;
  size_t done = 0;
  while (done < reads_.size() && (wait || reads_[done].polls >= 2)) ++done;
  std::vector<SlotRead> landed;
  for (size_t i = 0; i < done; ++i) landed.push_back(std::move(reads_[i].read));
  reads_.erase(reads_.begin(), reads_.begin() + static_cast<std::ptrdiff_t>(done));
  return landed;
}

absl::Status SettlingBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  Settle();
  return inner_->WriteSlot(slot, in);
}

}  // namespace linserve
