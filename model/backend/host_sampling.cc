#include "model/backend/host_sampling.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "model/backend/slot_pool.h"
#include "model/backend/token_mask.h"

namespace linserve {

HostSampling::HostSampling(int32_t capacity, int32_t vocab_size, int threads)
    : vocab_size_(vocab_size),
      threads_(std::max(threads, 1)),
      slots_(static_cast<size_t>(capacity)),
      scratch_(static_cast<size_t>(threads_)),
      top_ids_(static_cast<size_t>(threads_)) {}

void HostSampling::Copy(SlotId from, SlotId to) {
  const std::unique_ptr<SlotSampler>& source = slots_[from.value];
  slots_[to.value] = source == nullptr ? nullptr : std::make_unique<SlotSampler>(*source);
}

HostSampling::SlotSampler& HostSampling::Get(SlotId slot) {
  std::unique_ptr<SlotSampler>& sampler = slots_[slot.value];
  if (sampler == nullptr) sampler = std::make_unique<SlotSampler>(SamplingParams());
  return *sampler;
}

absl::Status HostSampling::CheckToken(TokenId token, absl::string_view what) const {
  if (token < 0 || token >= vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " = ", token, " is outside the vocabulary [0, ", vocab_size_, ")"));
  }
  return absl::OkStatus();
}

absl::Status HostSampling::Start(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                                 absl::Span<const TokenId> observed) {
  if (absl::Status s = ValidateSamplingParams(params); !s.ok()) return s;
  if (absl::Status s = CheckLogitBiasVocabulary(params.logit_bias, vocab_size_); !s.ok()) {
    return s;
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("StartSampling: top_logprobs = ", top_logprobs,
                                                   " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  for (size_t i = 0; i < observed.size(); ++i) {
    if (absl::Status s = CheckToken(observed[i], absl::StrCat("StartSampling: observed[", i, "]"));
        !s.ok()) {
      return s;
    }
  }
  SlotSampler& sampler = Get(slot);
  sampler.sampler.Restart(params);
  sampler.sampler.Observe(observed);
  sampler.top_logprobs = top_logprobs;
  sampler.started = true;
  return absl::OkStatus();
}

absl::Status HostSampling::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (absl::Status s =
            CheckToken(counts[i].token, absl::StrCat("SetSeenCounts: counts[", i, "].token"));
        !s.ok()) {
      return s;
    }
    if (counts[i].count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetSeenCounts: counts[", i, "].count = ", counts[i].count, " is negative"));
    }
  }
  Get(slot).sampler.SetSeen(counts);
  return absl::OkStatus();
}

absl::Status HostSampling::CheckOutput(absl::Span<const SlotId> slots,
                                       absl::Span<const uint32_t* const> masks,
                                       const SampleOutput& out, absl::string_view what) const {
  bool logprobs = false;
  for (SlotId slot : slots) {
    const SlotSampler* sampler = slots_[slot.value].get();
    if (sampler == nullptr || !sampler->started) return NoSamplerError(slot, what);
    logprobs = logprobs || sampler->top_logprobs > 0;
  }
  for (size_t i = 0; i < masks.size(); ++i) {
    if (absl::Status s = CheckTokenMask(masks[i], vocab_size_,
                                        absl::StrCat(what, ": row ", i, "'s allowed_tokens"));
        !s.ok()) {
      return s;
    }
  }
  return CheckSampleOutput(slots.size(), logprobs, out, what);
}

void HostSampling::SampleRows(absl::Span<const SlotId> slots,
                              absl::Span<const uint32_t* const> masks, const float* logits,
                              const SampleOutput& out) {
  const int64_t vocab = vocab_size_;
  const int rows = static_cast<int>(slots.size());
  cpu::ParallelFor(std::min(threads_, rows), rows, [&](int64_t row, int participant) {
    SlotSampler& sampler = *slots_[slots[row].value];
    const uint32_t* mask = masks.empty() ? nullptr : masks[row];
    const absl::Span<const float> l(logits + row * vocab, static_cast<size_t>(vocab));
    const TokenId token = sampler.sampler.Sample(l, mask, scratch_[participant]);
    out.tokens[row] = token;
    if (sampler.top_logprobs > 0) {
      out.logprobs[row] = LogProbOf(l, token, mask);
      TopLogprobsInto(l, sampler.top_logprobs, mask, top_ids_[participant],
                      out.top_logprobs.data() + row * kMaxTopLogprobs);
    }
  });
}

}  // namespace linserve
