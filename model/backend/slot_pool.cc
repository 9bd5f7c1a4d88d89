#include "model/backend/slot_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

constexpr int32_t kMaxSlots = 1 << 20;

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("BackendOptions.", field, " = ", value, " is outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int32_t> SlotCapacity(const ModelConfig& config, const BackendOptions& options,
                                     const BackendLimits& limits) {
  const int64_t slot_bytes =
      config.StateFloatsPerSlot() * StateElementBytes(options.state_precision);
  if (options.state_memory_budget_bytes < slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BackendOptions.state_memory_budget_bytes = ", options.state_memory_budget_bytes,
        " is below one slot's state (", slot_bytes, " bytes for this model)"));
  }
  if (absl::Status s = CheckRange("max_slots", options.max_slots, 1, kMaxSlots); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("prefill_chunk_size", options.prefill_chunk_size, 1,
                                  limits.max_prefill_chunk_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange("max_batch_size", options.max_batch_size, 1, limits.max_batch_size);
      !s.ok()) {
    return s;
  }
  return static_cast<int32_t>(
      std::min<int64_t>(options.max_slots, options.state_memory_budget_bytes / slot_bytes));
}

absl::Status CheckSampleOutput(size_t rows, bool logprobs_asked, const SampleOutput& out,
                               absl::string_view what) {
  if (out.tokens.size() != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": out.tokens has ", out.tokens.size(), " entries; expected ", rows));
  }
  if (logprobs_asked && (out.logprobs.size() < rows ||
                         out.top_logprobs.size() < rows * static_cast<size_t>(kMaxTopLogprobs))) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a slot asks for top_logprobs, so out.logprobs needs ", rows,
        " entries and out.top_logprobs ", rows * kMaxTopLogprobs, " (rows × kMaxTopLogprobs)"));
  }
  return absl::OkStatus();
}

absl::Status CheckPreviousRows(absl::Span<const DecodeItem> batch,
                               absl::Span<const DecodeItem> in_flight, absl::string_view what) {
  for (size_t i = 0; i < batch.size(); ++i) {
    const int32_t row = batch[i].previous_row;
    if (row < 0) continue;
    if (static_cast<size_t>(row) >= in_flight.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": batch[", i, "].previous_row = ", row, " names no row of the step ",
                       "in flight (", in_flight.size(), " rows)"));
    }
    if (in_flight[static_cast<size_t>(row)].slot != batch[i].slot) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": batch[", i, "].previous_row = ", row, " is slot ",
          in_flight[static_cast<size_t>(row)].slot.value, "'s row, not slot ",
          batch[i].slot.value, "'s"));
    }
  }
  return absl::OkStatus();
}

absl::Status NoSamplerError(SlotId slot, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": slot ", slot.value,
      " has no sampler (call StartSampling after allocating, resetting or writing it)"));
}

SlotPool::SlotPool(const ModelConfig& config, const BackendOptions& options, int32_t capacity)
    : config_(config),
      max_batch_size_(options.max_batch_size),
      max_slots_(options.max_slots),
      state_memory_budget_bytes_(options.state_memory_budget_bytes),
      capacity_(capacity),
      positions_(static_cast<size_t>(capacity), 0),
      allocated_(static_cast<size_t>(capacity), 0),
      batch_mark_(static_cast<size_t>(capacity), 0) {
  free_list_.reserve(static_cast<size_t>(capacity));
  for (int32_t i = capacity - 1; i >= 0; --i) free_list_.push_back(i);
}

absl::StatusOr<SlotId> SlotPool::Allocate() {
  if (free_list_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", capacity_, " state slots are in use (slot capacity = min(max_slots ",
                     max_slots_, ", state_memory_budget_bytes ", state_memory_budget_bytes_, " / ",
                     config_.StateFloatsPerSlot() * 4, " bytes per slot))"));
  }
  const int32_t id = free_list_.back();
  free_list_.pop_back();
  allocated_[id] = 1;
  positions_[id] = 0;
  return SlotId{id};
}

bool SlotPool::Free(SlotId slot) {
  if (slot.value < 0 || slot.value >= capacity_ || !allocated_[slot.value]) return false;
  allocated_[slot.value] = 0;
  free_list_.push_back(slot.value);
  return true;
}

absl::Status SlotPool::CheckAllocated(SlotId slot, absl::string_view what) const {
  if (slot.value < 0 || slot.value >= capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " = ", slot.value, " is not a slot id (capacity ", capacity_, ")"));
  }
  if (!allocated_[slot.value]) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " = ", slot.value, " is not an allocated slot"));
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CheckToken(TokenId token, absl::string_view what) const {
  if (token < 0 || token >= config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " = ", token, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CheckPositions(int64_t start, int64_t count, absl::string_view what) const {
  if (config_.position == PositionEmbedding::kLearned && start + count > config_.max_position) {
    return absl::OutOfRangeError(absl::StrCat(what, ": positions ", start, "..", start + count - 1,
                                              " are past the learned position table (max_position ",
                                              config_.max_position, ")"));
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CheckBatch(absl::Span<const DecodeItem> batch, bool previous_rows) {
  if (batch.empty()) return absl::InvalidArgumentError("Decode: batch is empty");
  if (static_cast<int64_t>(batch.size()) > max_batch_size_) {
    return absl::InvalidArgumentError(absl::StrCat("Decode: batch has ", batch.size(),
                                                   " items; max_batch_size is ", max_batch_size_));
  }
  ++batch_generation_;
  const bool learned = config_.position == PositionEmbedding::kLearned;
  for (size_t i = 0; i < batch.size(); ++i) {
    // Every step runs this for every row: the messages are only built for a row that fails.
    const SlotId slot = batch[i].slot;
    const TokenId token = batch[i].token;
    const bool fed = batch[i].previous_row >= 0;
    const bool fine = slot.value >= 0 && slot.value < capacity_ && allocated_[slot.value] &&
                      batch_mark_[slot.value] != batch_generation_ &&
                      (fed ? previous_rows : token >= 0 && token < config_.vocab_size) &&
                      (!learned || positions_[slot.value] + 1 <= config_.max_position);
    if (fine) {
      batch_mark_[slot.value] = batch_generation_;
      continue;
    }
    if (absl::Status s = CheckAllocated(slot, absl::StrCat("Decode: batch[", i, "].slot"));
        !s.ok()) {
      return s;
    }
    if (batch_mark_[slot.value] == batch_generation_) {
      return absl::InvalidArgumentError(absl::StrCat("Decode: batch[", i, "].slot = ", slot.value,
                                                     " appears twice in the batch"));
    }
    if (fed && !previous_rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Decode: batch[", i, "].previous_row = ", batch[i].previous_row,
          ": only a launch on a backend that launches ahead feeds a row from the step in ",
          "flight"));
    }
    if (!fed) {
      if (absl::Status s = CheckToken(token, absl::StrCat("Decode: batch[", i, "].token"));
          !s.ok()) {
        return s;
      }
    }
    return CheckPositions(positions_[slot.value], 1,
                          absl::StrCat("Decode: batch[", i, "].slot ", slot.value));
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CheckPrefill(SlotId slot, absl::Span<const TokenId> tokens,
                                    int64_t logits_size) const {
  if (absl::Status s = CheckAllocated(slot, "Prefill: slot"); !s.ok()) return s;
  if (tokens.empty()) return absl::InvalidArgumentError("Prefill: tokens is empty");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  if (logits_size != 0 && logits_size != vocab && logits_size != n * vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("Prefill: logits has ", logits_size, " floats; expected 0, ", vocab,
                     " (vocab_size: the last token's logits) or ", n * vocab,
                     " (tokens.size() × vocab_size: every position's logits)"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (absl::Status s = CheckToken(tokens[i], absl::StrCat("Prefill: tokens[", i, "]")); !s.ok()) {
      return s;
    }
  }
  return CheckPositions(positions_[slot.value], n, absl::StrCat("Prefill: slot ", slot.value));
}

absl::Status SlotPool::CheckPrefillBatch(absl::Span<const PrefillItem> batch) {
  if (batch.empty()) return absl::InvalidArgumentError("PrefillBatch: batch is empty");
  if (static_cast<int64_t>(batch.size()) > max_batch_size_) {
    return absl::InvalidArgumentError(absl::StrCat("PrefillBatch: batch has ", batch.size(),
                                                   " items; max_batch_size is ", max_batch_size_));
  }
  ++batch_generation_;
  for (size_t i = 0; i < batch.size(); ++i) {
    const PrefillItem& item = batch[i];
    if (absl::Status s =
            CheckAllocated(item.slot, absl::StrCat("PrefillBatch: batch[", i, "].slot"));
        !s.ok()) {
      return s;
    }
    if (batch_mark_[item.slot.value] == batch_generation_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PrefillBatch: batch[", i, "].slot = ", item.slot.value, " appears twice in the batch"));
    }
    batch_mark_[item.slot.value] = batch_generation_;
    if (item.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PrefillBatch: batch[", i, "].tokens is empty"));
    }
    for (size_t t = 0; t < item.tokens.size(); ++t) {
      if (absl::Status s = CheckToken(item.tokens[t],
                                      absl::StrCat("PrefillBatch: batch[", i, "].tokens[", t, "]"));
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s =
            CheckPositions(positions_[item.slot.value], static_cast<int64_t>(item.tokens.size()),
                           absl::StrCat("PrefillBatch: batch[", i, "].slot ", item.slot.value));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SlotPool::CheckWrite(SlotId slot, const StateBlob& in) const {
  if (absl::Status s = CheckAllocated(slot, "WriteSlot: slot"); !s.ok()) return s;
  if (static_cast<int64_t>(in.state.size()) != config_.StateFloatsPerSlot()) {
    return absl::InvalidArgumentError(absl::StrCat("WriteSlot: in.state has ", in.state.size(),
                                                   " floats; this model's state has ",
                                                   config_.StateFloatsPerSlot()));
  }
  if (in.position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteSlot: in.position = ", in.position, " is negative"));
  }
  if (config_.position == PositionEmbedding::kLearned && in.position > config_.max_position) {
    return absl::OutOfRangeError(absl::StrCat("WriteSlot: in.position = ", in.position,
                                              " is past the learned position table (max_position ",
                                              config_.max_position, ")"));
  }
  return absl::OkStatus();
}

}  // namespace linserve
