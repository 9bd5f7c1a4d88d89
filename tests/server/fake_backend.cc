#include "fake_backend.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

// A fixed pseudo-random value in [-1, 1) for (token, index).
float Table(TokenId token, int64_t index) {
  uint64_t x = static_cast<uint64_t>(token) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(index) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

}  // namespace

FakeBackend::FakeBackend(const ModelConfig& config, int32_t slots, int64_t eos_after)
    : config_(config),
      eos_after_(eos_after),
      slots_(slots),
      sampling_(slots, config.vocab_size, /*threads=*/1) {}

int32_t FakeBackend::free_slots() const {
  int32_t free = 0;
  for (const Slot& slot : slots_) free += slot.allocated ? 0 : 1;
  return free;
}

absl::StatusOr<SlotId> FakeBackend::AllocateSlot() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].allocated) {
      slots_[i].allocated = true;
      slots_[i].position = 0;
      slots_[i].state.assign(config_.StateFloatsPerSlot(), 0.0f);
      sampling_.Clear(SlotId{static_cast<int32_t>(i)});
      return SlotId{static_cast<int32_t>(i)};
    }
  }
  return absl::ResourceExhaustedError("fake backend: no free slot");
}

void FakeBackend::FreeSlot(SlotId slot) {
  if (slot.value >= 0 && slot.value < static_cast<int32_t>(slots_.size())) {
    slots_[slot.value].allocated = false;
  }
}

absl::Status FakeBackend::Check(SlotId slot) const {
  if (slot.value < 0 || slot.value >= static_cast<int32_t>(slots_.size()) ||
      !slots_[slot.value].allocated) {
    return absl::InvalidArgumentError(absl::StrCat("fake backend: slot ", slot.value,
                                                   " is not allocated"));
  }
  return absl::OkStatus();
}

absl::Status FakeBackend::ResetSlot(SlotId slot) {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  slots_[slot.value].position = 0;
  slots_[slot.value].state.assign(config_.StateFloatsPerSlot(), 0.0f);
  sampling_.Clear(slot);
  return absl::OkStatus();
}

absl::Status FakeBackend::CopySlot(SlotId from, SlotId to) {
  if (absl::Status s = Check(from); !s.ok()) return s;
  if (absl::Status s = Check(to); !s.ok()) return s;
  if (from == to) return absl::InvalidArgumentError("fake backend: copy onto itself");
  slots_[to.value].position = slots_[from.value].position;
  slots_[to.value].state = slots_[from.value].state;
  sampling_.Copy(from, to);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FakeBackend::SlotPosition(SlotId slot) const {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  return slots_[slot.value].position;
}

void FakeBackend::Feed(Slot& slot, TokenId token) const {
  // Like a real state, the z part of each head (the last feature_dim floats of it) only ever
  // adds non-negative terms: snapshots check it.
  const size_t z_begin = static_cast<size_t>(config_.feature_dim) * config_.head_dim;
  const size_t head_floats = z_begin + static_cast<size_t>(config_.feature_dim);
  for (size_t i = 0; i < slot.state.size(); ++i) {
    const float term = Table(token, static_cast<int64_t>(i));
    slot.state[i] = 0.75f * slot.state[i] + (i % head_floats >= z_begin ? std::fabs(term) : term);
  }
  ++slot.position;
}

void FakeBackend::Logits(const Slot& slot, absl::Span<float> out) const {
  const int64_t n = static_cast<int64_t>(slot.state.size());
  for (int32_t v = 0; v < config_.vocab_size; ++v) {
    out[v] = 2.0f * slot.state[(v * 7) % n] + 1.5f * slot.state[(v * 13 + 5) % n];
  }
  if (eos_after_ >= 0 && slot.position >= eos_after_ && config_.eos_token_id >= 0) {
    out[config_.eos_token_id] = 1e4f;
  }
}

absl::Status FakeBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                  absl::Span<float> logits) {
  {
    absl::MutexLock lock(&mu_);
    if (fail_) return absl::InternalError("fake backend: injected Prefill failure");
    calls_.push_back({Call::kPrefill, static_cast<int32_t>(tokens.size())});
  }
  if (absl::Status s = Check(slot); !s.ok()) return s;
  if (tokens.empty()) return absl::InvalidArgumentError("fake backend: empty prefill");
  const size_t vocab = config_.vocab_size;
  if (logits.size() != 0 && logits.size() != vocab && logits.size() != tokens.size() * vocab) {
    return absl::InvalidArgumentError("fake backend: bad logits size");
  }
  Slot& s = slots_[slot.value];
  for (size_t i = 0; i < tokens.size(); ++i) {
    Feed(s, tokens[i]);
    if (logits.size() == tokens.size() * vocab) Logits(s, logits.subspan(i * vocab, vocab));
  }
  if (logits.size() == vocab) Logits(s, logits);
  return absl::OkStatus();
}

absl::Status FakeBackend::PrefillBatch(absl::Span<const PrefillItem> batch,
                                       const SampleOutput& out) {
  int32_t tokens = 0;
  for (const PrefillItem& item : batch) tokens += static_cast<int32_t>(item.tokens.size());
  {
    absl::MutexLock lock(&mu_);
    calls_.push_back({Call::kPrefillBatch, tokens, static_cast<int32_t>(batch.size())});
  }
  return Backend::PrefillBatch(batch, out);
}

absl::Status FakeBackend::Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) {
  {
    absl::MutexLock lock(&mu_);
    waiting_at_gate_ = true;
    mu_.Await(absl::Condition(
        +[](FakeBackend* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->gate_closed_ || self->passes_ > 0;
        },
        this));
    if (gate_closed_) --passes_;
    waiting_at_gate_ = false;
    if (fail_) return absl::InternalError("fake backend: injected Decode failure");
    calls_.push_back({Call::kDecode, static_cast<int32_t>(batch.size())});
  }
  const size_t vocab = config_.vocab_size;
  if (logits.size() != batch.size() * vocab) {
    return absl::InvalidArgumentError("fake backend: bad logits size");
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (absl::Status s = Check(batch[i].slot); !s.ok()) return s;
    Slot& slot = slots_[batch[i].slot.value];
    Feed(slot, batch[i].token);
    Logits(slot, logits.subspan(i * vocab, vocab));
  }
  return absl::OkStatus();
}

absl::Status FakeBackend::ReadSlot(SlotId slot, StateBlob& out) const {
  {
    absl::MutexLock lock(&mu_);
    ++slot_reads_;
  }
  return Read(slot, out);
}

absl::StatusOr<int64_t> FakeBackend::StartReadSlot(SlotId slot) {
  StateBlob state;
  if (absl::Status s = Read(slot, state); !s.ok()) return s;
  int64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = reads_started_++;
  }
  finished_reads_.push_back(SlotRead{.ticket = ticket, .state = std::move(state)});
  return ticket;
}

std::vector<Backend::SlotRead> FakeBackend::FinishedReads(bool wait) {
  {
    absl::MutexLock lock(&mu_);
    if (!wait && reads_land_when_waited_) return {};
  }
  return std::exchange(finished_reads_, {});
}

void FakeBackend::set_reads_land_when_waited(bool only_then) {
  absl::MutexLock lock(&mu_);
  reads_land_when_waited_ = only_then;
}

int64_t FakeBackend::slot_reads() const {
  absl::MutexLock lock(&mu_);
  return slot_reads_;
}

int64_t FakeBackend::reads_started() const {
  absl::MutexLock lock(&mu_);
  return reads_started_;
}

absl::Status FakeBackend::Read(SlotId slot, StateBlob& out) const {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  out.position = slots_[slot.value].position;
  out.state = slots_[slot.value].state;
  return absl::OkStatus();
}

absl::Status FakeBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  if (in.state.size() != static_cast<size_t>(config_.StateFloatsPerSlot())) {
    return absl::InvalidArgumentError("fake backend: state size mismatch");
  }
  slots_[slot.value].position = in.position;
  slots_[slot.value].state = in.state;
  sampling_.Clear(slot);
  return absl::OkStatus();
}

absl::Status FakeBackend::StartSampling(SlotId slot, const SamplingParams& params,
                                        int32_t top_logprobs, absl::Span<const TokenId> observed) {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    if (fail_start_sampling_) {
      return absl::InternalError("fake backend: injected StartSampling failure");
    }
  }
  return sampling_.Start(slot, params, top_logprobs, observed);
}

absl::Status FakeBackend::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  return sampling_.SetSeenCounts(slot, counts);
}

absl::Status FakeBackend::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                          const SampleOutput& out) {
  batch_slots_.clear();
  batch_masks_.clear();
  for (const DecodeItem& item : batch) {
    if (absl::Status s = Check(item.slot); !s.ok()) return s;
    batch_slots_.push_back(item.slot);
    batch_masks_.push_back(item.allowed_tokens);
  }
  if (absl::Status s = sampling_.CheckOutput(batch_slots_, batch_masks_, out, "DecodeAndSample");
      !s.ok()) {
    return s;
  }
  logits_.resize(batch.size() * static_cast<size_t>(config_.vocab_size));
  if (absl::Status s = Decode(batch, absl::MakeSpan(logits_)); !s.ok()) return s;
  sampling_.SampleRows(batch_slots_, batch_masks_, logits_.data(), out);
  return absl::OkStatus();
}

absl::Status FakeBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                           const SampleOutput& out,
                                           const uint32_t* allowed_tokens) {
  if (absl::Status s = Check(slot); !s.ok()) return s;
  if (absl::Status s =
          sampling_.CheckOutput({&slot, 1}, {&allowed_tokens, 1}, out, "PrefillAndSample");
      !s.ok()) {
    return s;
  }
  logits_.resize(static_cast<size_t>(config_.vocab_size));
  if (absl::Status s = Prefill(slot, tokens, absl::MakeSpan(logits_)); !s.ok()) return s;
  sampling_.SampleRows({&slot, 1}, {&allowed_tokens, 1}, logits_.data(), out);
  return absl::OkStatus();
}

void FakeBackend::set_fail(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_ = fail;
}

void FakeBackend::set_fail_start_sampling(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_start_sampling_ = fail;
}

void FakeBackend::CloseGate() {
  absl::MutexLock lock(&mu_);
  gate_closed_ = true;
}

void FakeBackend::Open() {
  absl::MutexLock lock(&mu_);
  gate_closed_ = false;
  passes_ = 0;
}

void FakeBackend::Step() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&waiting_at_gate_));
  ++passes_;
  mu_.Await(absl::Condition(
      +[](FakeBackend* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->passes_ == 0 && self->waiting_at_gate_;
      },
      this));
}

bool FakeBackend::WaitingAtGate() const {
  absl::MutexLock lock(&mu_);
  return waiting_at_gate_;
}

std::vector<FakeBackend::Call> FakeBackend::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

}  // namespace linserve
