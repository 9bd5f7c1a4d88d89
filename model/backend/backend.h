// Backend: runs the model on one device over a fixed pool of recurrent-state slots.
// The CPU implementation is the source of truth; every other backend is tested against it.
#ifndef LINSERVE_MODEL_BACKEND_BACKEND_H_
#define LINSERVE_MODEL_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model.h"
#include "model/backend/sampler.h"
#include "model/backend/state_precision.h"
#include "model/backend/weight_precision.h"
#include "model/types.h"

namespace linserve {

// A session's whole recurrent state, as plain host memory (export, hibernate, snapshots).
// `state` layout: the layers' slices concatenated (ModelConfig::StateOffsets), each laid out as
// its mixer kind declares (model/layers/; linear_attention: per head S (feature_dim × head_dim,
// row-major) then z (feature_dim)); ModelConfig::StateFloatsPerSlot() floats in all.
struct StateBlob {
  int64_t position = 0;  // tokens consumed so far (the next token's position index)
  std::vector<float> state;
};

enum class DeviceKind { kCpu, kCuda };

// The most top-logprob alternatives a sampled token can report.
inline constexpr int32_t kMaxTopLogprobs = 20;

// Where DecodeAndSample and PrefillAndSample write, row i for batch[i] (one row for a prefill).
// `logprobs` and `top_logprobs` are only written for rows whose slot asked for top_logprobs > 0
// and may be empty when no row did.
struct SampleOutput {
  // One token per row.
  absl::Span<TokenId> tokens = {};
  // One per row: log p(token) under the temperature-free distribution (log-softmax of the
  // logits, before penalties) restricted to the row's token mask: the masked distribution, in
  // which a disallowed token has probability 0 (no mask: the whole vocabulary).
  absl::Span<float> logprobs = {};
  // kMaxTopLogprobs entries per row: row i's n = top_logprobs most likely tokens of that masked
  // distribution, most likely first (ties to the lowest id), at [i · kMaxTopLogprobs, + n); when
  // the mask allows fewer than n tokens, the entries after the allowed ones are the lowest
  // disallowed ids with logprob -inf.
  absl::Span<TokenLogprob> top_logprobs = {};
};

// One session's share of a PrefillBatch call.
struct PrefillItem {
  SlotId slot;
  // Non-empty; consecutive tokens fed after what the slot has consumed.
  absl::Span<const TokenId> tokens = {};
  // Pick the next token from the last position's logits, as PrefillAndSample does (the last
  // chunk of a prompt).
  bool sample = false;
  // With `sample`: the tokens the pick may choose, as DecodeItem::allowed_tokens.
  const uint32_t* allowed_tokens = nullptr;
};

struct BackendOptions {
  // Bytes the state pool may use; the slot count is min(max_slots, budget / state bytes).
  // Default: 1 GiB.
  int64_t state_memory_budget_bytes = int64_t{1} << 30;
  // Upper bound on the slot count whatever the budget. Default: 1024.
  int32_t max_slots = 1024;
  // Tokens per chunk of the chunked-parallel prefill. Default: 64.
  int32_t prefill_chunk_size = 64;
  // CPU threads for GEMMs and per-slot work; 0 = all cores. Default: 0.
  int32_t num_threads = 0;
  // Largest decode batch the backend must accept in one Decode call. Default: 256.
  int32_t max_batch_size = 256;
  // Storage precision of the weight matrices (weight_precision.h): auto is bf16 on CUDA and fp32
  // on the CPU; int8 is CPU only. Default: kAuto.
  WeightPrecision weight_precision = WeightPrecision::kAuto;
  // Storage precision of the recurrent state in the slot pool (state_precision.h): bf16 is CUDA
  // only; the state crosses ReadSlot / WriteSlot as fp32 either way. Default: kFp32.
  StatePrecision state_precision = StatePrecision::kFp32;
};

// Not thread-safe: one owner (the engine thread) calls it.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind device() const = 0;
  virtual const ModelConfig& config() const = 0;
  // Number of slots in the pool (fixed at creation).
  virtual int32_t slot_capacity() const = 0;
  virtual int32_t free_slots() const = 0;

  // A zeroed slot (position 0), or RESOURCE_EXHAUSTED when the pool is full.
  virtual absl::StatusOr<SlotId> AllocateSlot() = 0;
  // Returns the slot to the pool. Freeing an unallocated slot is a no-op.
  virtual void FreeSlot(SlotId slot) = 0;
  // Zeroes the state and position of an allocated slot.
  virtual absl::Status ResetSlot(SlotId slot) = 0;
  // Copies state and position (fork); `to` must be allocated and differ from `from`.
  virtual absl::Status CopySlot(SlotId from, SlotId to) = 0;
  virtual absl::StatusOr<int64_t> SlotPosition(SlotId slot) const = 0;

  // Feeds `tokens` (non-empty) to the slot with the chunked-parallel form, advancing its state
  // exactly as feeding them one by one would. `logits` selects what comes back:
  // size 0: nothing; vocab_size: the last token's logits; tokens.size() * vocab_size: every
  // position's logits, row-major. Any other size is INVALID_ARGUMENT.
  virtual absl::Status Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                               absl::Span<float> logits) = 0;

  // One step for a batch of distinct slots: logits is batch.size() × vocab_size, row i for
  // batch[i]. A session's logits do not depend on which other sessions share the batch.
  virtual absl::Status Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) = 0;

  // ---- Sampling on the backend ----
  // Each slot carries sampling state beside its recurrent state: the parameters and random
  // stream set by StartSampling, and the seen-token counts the penalties use. The counts belong
  // to the slot: AllocateSlot, ResetSlot and WriteSlot clear them, CopySlot copies them with the
  // rest, every token DecodeAndSample or PrefillAndSample picks is added, and SetSeenCounts
  // replaces them. So a session that stays in its slot never replays its history; one loaded
  // into a slot gets its counts in O(distinct tokens).
  //
  // Each pick is model/backend/sampler.h's algorithm over the row's logits with the slot's
  // parameters, counts and stream: the same seed and logits give the same token alone or in any
  // batch. A row's token mask (DecodeItem/PrefillItem::allowed_tokens, PrefillAndSample's
  // allowed_tokens; model/backend/token_mask.h) restricts the pick and its logprobs to the tokens
  // it allows (sampler.h's step 0); a mask that allows no token of the vocabulary is
  // INVALID_ARGUMENT naming its row of `out`, checked before anything changes.

  // Sets `slot`'s parameters (checked with ValidateSamplingParams) and top_logprobs (in
  // [0, kMaxTopLogprobs]) for its next picks, seeds its random stream with params.seed and adds
  // `observed` (a new prompt's tokens) to its seen counts.
  virtual absl::Status StartSampling(SlotId slot, const SamplingParams& params,
                                     int32_t top_logprobs,
                                     absl::Span<const TokenId> observed) = 0;
  // Replaces `slot`'s seen counts (tokens in the vocabulary, counts >= 0).
  virtual absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) = 0;
  // One Decode step, then each row's next token picked with its slot's sampling state
  // (FAILED_PRECONDITION naming a slot that has had no StartSampling since it was allocated,
  // reset or written). Only the tokens, and the logprobs rows asked for, leave the device.
  virtual absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                                       const SampleOutput& out) = 0;
  // Prefill(slot, tokens) and then the next token picked from the last position's logits, as
  // DecodeAndSample does for one row, among the tokens `allowed_tokens` allows (a token mask as
  // DecodeItem::allowed_tokens; nullptr = all).
  virtual absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                        const SampleOutput& out,
                                        const uint32_t* allowed_tokens) = 0;

  // ---- Batched prefill ----
  // Feeds each item's tokens to its slot in one call (a varlen batch: the sessions' rows share
  // the GEMMs and each mixer's kernels), leaving every slot as Prefill(slot, tokens, {})
  // alone would up to rounding, and for each item with `sample` picks the next token as
  // PrefillAndSample does; `out` has one row per sampling item, in batch order (no rows when
  // none samples). `batch`: at most BackendOptions::max_batch_size items naming distinct slots.
  // A validation error (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION) may leave the items
  // before the failing one fed; the caller treats every slot of a failed batch as unknown.
  //
  // The default feeds the items one by one with Prefill and PrefillAndSample.
  virtual absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out);

  // ---- Pipelining ----
  // LaunchDecodeAndSample starts the step DecodeAndSample(batch, out) describes, and on an
  // asynchronous backend returns before the step has run, so that the host can work while the
  // device computes; CollectSamples waits for the oldest step in flight, after which its `out`
  // (whose buffers must stay valid until then) holds its results. At most
  // max_steps_in_flight() steps are in flight: on an asynchronous backend a launch beyond that,
  // or a collect while none is, is FAILED_PRECONDITION. Every other call may be made while
  // steps are in flight and acts on the backend as the steps leave it (slot positions advance
  // at the launch; calls that read or write a slot wait for the steps).
  //
  // Launch-ahead (max_steps_in_flight() == 2; docs/architecture.md §2.2): a step may be launched
  // while the previous one is in flight, a row feeding that step's pick for its slot
  // (DecodeItem::previous_row) without the host having seen it. Steps run in launch order.
  //
  // Whether LaunchDecodeAndSample returns before the step has run. A synchronous backend (the
  // default) runs the step in the launch, which returns its outcome, and its CollectSamples
  // does nothing.
  virtual bool asynchronous() const { return false; }
  // 1 (the default): a launch needs the previous step collected, and no row may have a
  // previous_row; 2: launch-ahead, above. Only an asynchronous backend returns 2.
  virtual int32_t max_steps_in_flight() const { return 1; }
  virtual absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                             const SampleOutput& out) {
    return DecodeAndSample(batch, out);
  }
  virtual absl::Status CollectSamples() { return absl::OkStatus(); }

  virtual absl::Status ReadSlot(SlotId slot, StateBlob& out) const = 0;
  // `in.state` must have exactly StateFloatsPerSlot() floats.
  virtual absl::Status WriteSlot(SlotId slot, const StateBlob& in) = 0;

  // ---- Asynchronous reads (exports off the step's path) ----
  // StartReadSlot begins reading the slot as the work launched so far leaves it (the steps in
  // flight included: what ReadSlot would return now) and returns its ticket without waiting
  // for the device; later calls may change the slot at once. FinishedReads hands over the reads
  // that have landed, in start order: with `wait`, every read started; without, those done by
  // now (a read not done yet holds back the ones after it). A read's error (an invalid slot
  // is refused by StartReadSlot itself) comes with its ticket.
  //
  // The default reads at the start with ReadSlot (a CPU's copy) and hands the result over at
  // the next FinishedReads.
  struct SlotRead {
    int64_t ticket = 0;
    absl::StatusOr<StateBlob> state;
  };
  virtual absl::StatusOr<int64_t> StartReadSlot(SlotId slot);
  virtual std::vector<SlotRead> FinishedReads(bool wait);

 private:
  int64_t next_read_ = 0;           // the default StartReadSlot's tickets
  std::vector<SlotRead> finished_;  // its reads not handed over yet
};

// The CPU backend; never fails for a valid model except when the options are out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const BackendOptions& options);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_BACKEND_H_
