// SlotPool: the slot bookkeeping and argument validation every Backend shares — which slots are
// allocated, each slot's position, and the checks of slot ids, tokens, positions, decode
// batches, prefill logits sizes and state blobs — so that every backend accepts and refuses
// exactly the same calls with the same messages (the CPU backend is the source of truth, and
// this is the part of it that cannot drift). The pool holds no state memory: each backend
// keeps its own (host or device) and indexes it by slot id.
//
// Not thread-safe: owned by its backend, which has one owner.
#ifndef LINSERVE_MODEL_BACKEND_SLOT_POOL_H_
#define LINSERVE_MODEL_BACKEND_SLOT_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/format/config.h"
#include "model/types.h"

namespace linserve {

// A backend's own upper bounds on the options SlotCapacity checks.
struct BackendLimits {
  int32_t max_prefill_chunk_size = 0;
  int32_t max_batch_size = 0;
};

// Checks the options every backend shares against `limits` (errors name the BackendOptions
// field and its range) and returns the slot count
// min(max_slots, state_memory_budget_bytes / state bytes per slot), a slot's bytes being its
// state's elements in options.state_precision.
absl::StatusOr<int32_t> SlotCapacity(const ModelConfig& config, const BackendOptions& options,
                                     const BackendLimits& limits);

// The checks of Backend's sampling calls that do not depend on where the sampler state lives:
// `out` has a token per row and, when any row's slot asked for top_logprobs, a logprob and
// kMaxTopLogprobs alternatives per row (errors name `what`).
absl::Status CheckSampleOutput(size_t rows, bool logprobs_asked, const SampleOutput& out,
                               absl::string_view what);
// Launch-ahead (DecodeItem::previous_row): INVALID_ARGUMENT naming `what` unless every row of
// `batch` that has a previous_row names a row of `in_flight` (the step launched before it and
// not yet collected; empty when none is) of the same slot.
absl::Status CheckPreviousRows(absl::Span<const DecodeItem> batch,
                               absl::Span<const DecodeItem> in_flight, absl::string_view what);
// The FAILED_PRECONDITION for a slot that has had no StartSampling since it was allocated, reset
// or written.
absl::Status NoSamplerError(SlotId slot, absl::string_view what);

class SlotPool {
 public:
  SlotPool(const ModelConfig& config, const BackendOptions& options, int32_t capacity);

  int32_t capacity() const { return capacity_; }
  int32_t free_slots() const { return static_cast<int32_t>(free_list_.size()); }

  // The lowest free id at position 0, or RESOURCE_EXHAUSTED explaining the capacity.
  absl::StatusOr<SlotId> Allocate();
  // False (and nothing changes) when `slot` is not allocated.
  bool Free(SlotId slot);

  // Position of an allocated slot (the caller has checked it).
  int64_t position(SlotId slot) const { return positions_[slot.value]; }
  void set_position(SlotId slot, int64_t position) { positions_[slot.value] = position; }
  void Advance(SlotId slot, int64_t tokens) { positions_[slot.value] += tokens; }

  // INVALID_ARGUMENT naming `what` unless `slot` is allocated.
  absl::Status CheckAllocated(SlotId slot, absl::string_view what) const;
  // INVALID_ARGUMENT naming `what` unless 0 <= token < vocab_size.
  absl::Status CheckToken(TokenId token, absl::string_view what) const;
  // OUT_OF_RANGE if a learned position table cannot cover positions [start, start + count).
  absl::Status CheckPositions(int64_t start, int64_t count, absl::string_view what) const;
  // A decode batch: non-empty, at most max_batch_size rows, allocated and distinct slots, tokens
  // in the vocabulary, one more position available for each slot. A row with a previous_row
  // (launch-ahead) is refused unless `previous_rows`, and then its token is not read (the
  // backend has checked the row with CheckPreviousRows).
  absl::Status CheckBatch(absl::Span<const DecodeItem> batch, bool previous_rows = false);
  // A prefill: allocated slot, non-empty tokens in the vocabulary, positions available, and a
  // logits size of 0, vocab_size or tokens.size() × vocab_size.
  absl::Status CheckPrefill(SlotId slot, absl::Span<const TokenId> tokens,
                            int64_t logits_size) const;
  // A PrefillBatch: 1 to max_batch_size items, allocated and distinct slots, non-empty tokens
  // in the vocabulary, positions available.
  absl::Status CheckPrefillBatch(absl::Span<const PrefillItem> batch);
  // WriteSlot's blob: allocated slot, StateFloatsPerSlot() floats, a position the model can
  // continue from.
  absl::Status CheckWrite(SlotId slot, const StateBlob& in) const;

 private:
  const ModelConfig& config_;
  const int32_t max_batch_size_;
  const int32_t max_slots_;
  const int64_t state_memory_budget_bytes_;
  const int32_t capacity_;
  std::vector<int64_t> positions_;
  std::vector<char> allocated_;
  std::vector<int32_t> free_list_;    // a stack; the lowest ids are handed out first
  std::vector<uint64_t> batch_mark_;  // duplicate detection in CheckBatch, CheckPrefillBatch
  uint64_t batch_generation_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_SLOT_POOL_H_
