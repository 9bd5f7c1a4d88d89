#include "bench/serving_loop/instant_backend.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/sampler.h"
#include "model/backend/token_mask.h"

namespace linserve {
namespace {

constexpr TokenId kFirstToken = 32;  // ' '
constexpr TokenId kTokenRange = 95;  // ' ' .. '~'
constexpr float kPickedLogit = 30.0f;

uint64_t Mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 32);
}

}  // namespace

absl::StatusOr<std::unique_ptr<InstantBackend>> InstantBackend::Create(
    const ModelConfig& config, const BackendOptions& options) {
  if (config.vocab_size < kFirstToken + kTokenRange) {
    return absl::InvalidArgumentError(absl::StrCat("InstantBackend: vocab_size ",
                                                   config.vocab_size, " is below ",
                                                   kFirstToken + kTokenRange));
  }
  const absl::StatusOr<int32_t> capacity =
      SlotCapacity(config, options,
                   {.max_prefill_chunk_size = std::numeric_limits<int32_t>::max(),
                    .max_batch_size = std::numeric_limits<int32_t>::max()});
  if (!capacity.ok()) return capacity.status();
  return std::unique_ptr<InstantBackend>(new InstantBackend(config, options, *capacity));
}

InstantBackend::InstantBackend(const ModelConfig& config, const BackendOptions& options,
                               int32_t capacity)
    : config_(config),
      pool_(config_, options, capacity),
      sampling_(static_cast<size_t>(capacity)) {
  batch_slots_.reserve(static_cast<size_t>(options.max_batch_size));
  batch_masks_.reserve(static_cast<size_t>(options.max_batch_size));
}

TokenId InstantBackend::NextToken(uint64_t seed, int64_t position) {
  const uint64_t h = Mix(seed * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(position));
  return kFirstToken + static_cast<TokenId>(h % kTokenRange);
}

TokenId InstantBackend::Next(SlotId slot) const {
  return NextToken(sampling_[slot.value].seed, pool_.position(slot));
}

void InstantBackend::WriteLogits(SlotId slot, absl::Span<float> row) const {
  std::fill(row.begin(), row.end(), 0.0f);
  row[Next(slot)] = kPickedLogit;
}

absl::StatusOr<SlotId> InstantBackend::AllocateSlot() {
  absl::StatusOr<SlotId> slot = pool_.Allocate();
  if (slot.ok()) sampling_[slot->value] = {};
  return slot;
}

void InstantBackend::FreeSlot(SlotId slot) { pool_.Free(slot); }

absl::Status InstantBackend::ResetSlot(SlotId slot) {
  if (absl::Status s = pool_.CheckAllocated(slot, "ResetSlot: slot"); !s.ok()) return s;
  pool_.set_position(slot, 0);
  sampling_[slot.value] = {};
  return absl::OkStatus();
}

absl::Status InstantBackend::CopySlot(SlotId from, SlotId to) {
  if (absl::Status s = pool_.CheckAllocated(from, "CopySlot: from"); !s.ok()) return s;
  if (absl::Status s = pool_.CheckAllocated(to, "CopySlot: to"); !s.ok()) return s;
  if (from == to) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopySlot: from and to are both slot ", from.value));
  }
  pool_.set_position(to, pool_.position(from));
  sampling_[to.value] = sampling_[from.value];
  return absl::OkStatus();
}

absl::StatusOr<int64_t> InstantBackend::SlotPosition(SlotId slot) const {
  if (absl::Status s = pool_.CheckAllocated(slot, "SlotPosition: slot"); !s.ok()) return s;
  return pool_.position(slot);
}

absl::Status InstantBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                     absl::Span<float> logits) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, static_cast<int64_t>(logits.size()));
      !s.ok()) {
    return s;
  }
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  const bool every = logits.size() == tokens.size() * vocab && tokens.size() > 1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    pool_.Advance(slot, 1);
    if (every) WriteLogits(slot, logits.subspan(i * vocab, vocab));
  }
  if (!every && logits.size() == vocab) WriteLogits(slot, logits);
  return absl::OkStatus();
}

absl::Status InstantBackend::Decode(absl::Span<const DecodeItem> batch,
                                    absl::Span<float> logits) {
  if (absl::Status s = pool_.CheckBatch(batch); !s.ok()) return s;
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  if (logits.size() != batch.size() * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("Decode: logits has ", logits.size(),
                                                   " floats; expected batch.size() × vocab_size = ",
                                                   batch.size() * vocab));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    pool_.Advance(batch[i].slot, 1);
    WriteLogits(batch[i].slot, logits.subspan(i * vocab, vocab));
  }
  return absl::OkStatus();
}

absl::Status InstantBackend::StartSampling(SlotId slot, const SamplingParams& params,
                                           int32_t top_logprobs,
                                           absl::Span<const TokenId> observed) {
  if (absl::Status s = pool_.CheckAllocated(slot, "StartSampling: slot"); !s.ok()) return s;
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  if (absl::Status s = CheckLogitBiasVocabulary(params.logit_bias, config_.vocab_size); !s.ok()) {
    return s;
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("StartSampling: top_logprobs = ", top_logprobs,
                                                   " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  for (size_t i = 0; i < observed.size(); ++i) {
    if (observed[i] < 0 || observed[i] >= config_.vocab_size) {
      return pool_.CheckToken(observed[i], absl::StrCat("StartSampling: observed[", i, "]"));
    }
  }
  sampling_[slot.value] = {.started = true, .seed = params.seed, .top_logprobs = top_logprobs};
  return absl::OkStatus();
}

absl::Status InstantBackend::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  if (absl::Status s = pool_.CheckAllocated(slot, "SetSeenCounts: slot"); !s.ok()) return s;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i].token < 0 || counts[i].token >= config_.vocab_size) {
      return pool_.CheckToken(counts[i].token, absl::StrCat("SetSeenCounts: counts[", i, "]"));
    }
    if (counts[i].count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetSeenCounts: counts[", i, "].count = ", counts[i].count));
    }
  }
  return absl::OkStatus();
}

absl::Status InstantBackend::CheckOutput(absl::Span<const SlotId> slots,
                                         absl::Span<const uint32_t* const> masks,
                                         const SampleOutput& out, const char* what) const {
  bool logprobs = false;
  for (SlotId slot : slots) {
    if (!sampling_[slot.value].started) return NoSamplerError(slot, what);
    logprobs = logprobs || sampling_[slot.value].top_logprobs > 0;
  }
  for (size_t i = 0; i < masks.size(); ++i) {
    if (absl::Status s = CheckTokenMask(masks[i], config_.vocab_size,
                                        absl::StrCat(what, ": row ", i, "'s allowed_tokens"));
        !s.ok()) {
      return s;
    }
  }
  return CheckSampleOutput(slots.size(), logprobs, out, what);
}

void InstantBackend::Pick(SlotId slot, const uint32_t* mask, size_t row,
                          const SampleOutput& out) const {
  TokenId token = Next(slot);
  if (!TokenAllowed(mask, token)) {
    token = 0;
    while (!TokenAllowed(mask, token)) ++token;  // CheckOutput saw an allowed token
  }
  out.tokens[row] = token;
  const int32_t n = sampling_[slot.value].top_logprobs;
  if (n == 0) return;
  // In effect a one-hot distribution: log p = 0 for the token, -inf for the rest (the lowest
  // ids first among those ties).
  out.logprobs[row] = 0.0f;
  TokenLogprob* top = &out.top_logprobs[row * kMaxTopLogprobs];
  top[0] = {token, 0.0f};
  TokenId next = 0;
  for (int32_t i = 1; i < n; ++i, ++next) {
    if (next == token) ++next;
    top[i] = {next, -std::numeric_limits<float>::infinity()};
  }
}

absl::Status InstantBackend::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                             const SampleOutput& out) {
  counters_.NoteCaller();
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = pool_.CheckBatch(batch); !s.ok()) return s;
  batch_slots_.clear();
  batch_masks_.clear();
  for (const DecodeItem& item : batch) {
    batch_slots_.push_back(item.slot);
    batch_masks_.push_back(item.allowed_tokens);
  }
  if (absl::Status s = CheckOutput(batch_slots_, batch_masks_, out, "DecodeAndSample"); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    pool_.Advance(batch[i].slot, 1);
    Pick(batch[i].slot, batch[i].allowed_tokens, i, out);
  }
  counters_.CountStep(static_cast<int32_t>(batch.size()),
                      std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
  return absl::OkStatus();
}

absl::Status InstantBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                              const SampleOutput& out,
                                              const uint32_t* allowed_tokens) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, 0); !s.ok()) return s;
  if (absl::Status s = CheckOutput({&slot, 1}, {&allowed_tokens, 1}, out, "PrefillAndSample");
      !s.ok()) {
    return s;
  }
  pool_.Advance(slot, static_cast<int64_t>(tokens.size()));
  Pick(slot, allowed_tokens, 0, out);
  return absl::OkStatus();
}

absl::Status InstantBackend::ReadSlot(SlotId slot, StateBlob& out) const {
  if (absl::Status s = pool_.CheckAllocated(slot, "ReadSlot: slot"); !s.ok()) return s;
  out.position = pool_.position(slot);
  out.state.assign(static_cast<size_t>(config_.StateFloatsPerSlot()), 0.0f);
  return absl::OkStatus();
}

absl::Status InstantBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  if (absl::Status s = pool_.CheckWrite(slot, in); !s.ok()) return s;
  pool_.set_position(slot, in.position);
  sampling_[slot.value] = {};
  return absl::OkStatus();
}

}  // namespace linserve
