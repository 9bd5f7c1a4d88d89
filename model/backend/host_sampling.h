// HostSampling: Backend's sampling contract (model/backend/backend.h) for a backend whose logits are in
// host memory: each slot's Sampler (parameters, random stream, seen counts) and the picking of a
// batch's rows, one row per task on up to `threads` threads (results do not depend on which
// thread picks which row). CpuBackend uses it, and so do test backends, so that every host-side
// backend samples exactly as the source of truth does.
//
// Not thread-safe: owned by its backend, which has one owner. Slot ids are the caller's to
// check (allocated, in range).
#ifndef LINSERVE_MODEL_BACKEND_HOST_SAMPLING_H_
#define LINSERVE_MODEL_BACKEND_HOST_SAMPLING_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "model/types.h"

namespace linserve {

class HostSampling {
 public:
  HostSampling(int32_t capacity, int32_t vocab_size, int threads);

  // A slot allocated, reset or written: no sampler, no seen counts.
  void Clear(SlotId slot) { slots_[slot.value].reset(); }
  // CopySlot: `to` gets `from`'s sampler, stream position and counts.
  void Copy(SlotId from, SlotId to);

  // Backend::StartSampling and Backend::SetSeenCounts, with the arguments checked.
  absl::Status Start(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                     absl::Span<const TokenId> observed);
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts);

  // `out` fits `slots` (a token per row, logprob spans when a slot asks for them), every slot
  // has had Start, and every row's token mask (masks[i] for row i, nullptr = none; `masks` is
  // empty or one per row) allows a token of the vocabulary; errors name `what` and the row.
  absl::Status CheckOutput(absl::Span<const SlotId> slots, absl::Span<const uint32_t* const> masks,
                           const SampleOutput& out, absl::string_view what) const;
  // Picks row i's token from logits row i (vocab_size floats each) with slots[i]'s sampler,
  // among the tokens masks[i] allows (`masks` as CheckOutput's), and its logprobs under the
  // masked distribution.
  void SampleRows(absl::Span<const SlotId> slots, absl::Span<const uint32_t* const> masks,
                  const float* logits, const SampleOutput& out);

 private:
  struct SlotSampler {
    explicit SlotSampler(const SamplingParams& params) : sampler(params) {}
    Sampler sampler;
    int32_t top_logprobs = 0;
    bool started = false;  // Start since the slot was cleared
  };
  absl::Status CheckToken(TokenId token, absl::string_view what) const;
  SlotSampler& Get(SlotId slot);

  const int32_t vocab_size_;
  const int threads_;
  std::vector<std::unique_ptr<SlotSampler>> slots_;  // created at first use
  std::vector<SamplerScratch> scratch_;              // per thread
  std::vector<std::vector<int32_t>> top_ids_;        // per thread
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_HOST_SAMPLING_H_
