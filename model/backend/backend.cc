#include "model/backend/backend.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/backend/token_mask.h"

namespace linserve {

absl::StatusOr<int64_t> Backend::StartReadSlot(SlotId slot) {
  StateBlob state;
  if (absl::Status s = ReadSlot(slot, state); !s.ok()) return s;
  finished_.push_back(SlotRead{.ticket = next_read_, .state = std::move(state)});
  return next_read_++;
}

std::vector<Backend::SlotRead> Backend::FinishedReads(bool) { return std::exchange(finished_, {}); }

absl::Status Backend::PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) {
  std::vector<int32_t> slots;
  size_t sampled = 0;
  for (const PrefillItem& item : batch) {
    slots.push_back(item.slot.value);
    sampled += item.sample ? 1 : 0;
  }
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) {
    return absl::InvalidArgumentError("PrefillBatch: a slot appears twice in the batch");
  }
  if (out.tokens.size() != sampled) {
    return absl::InvalidArgumentError(absl::StrCat("PrefillBatch: out.tokens has ",
                                                   out.tokens.size(), " entries; expected ",
                                                   sampled, " (one per sampling item)"));
  }
  // Every mask is checked before any item is fed.
  size_t row = 0;
  for (const PrefillItem& item : batch) {
    if (!item.sample) continue;
    if (absl::Status s =
            CheckTokenMask(item.allowed_tokens, config().vocab_size,
                           absl::StrCat("PrefillBatch: row ", row, "'s allowed_tokens"));
        !s.ok()) {
      return s;
    }
    ++row;
  }
  if ((!out.logprobs.empty() && out.logprobs.size() < sampled) ||
      (!out.top_logprobs.empty() && out.top_logprobs.size() < sampled * kMaxTopLogprobs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PrefillBatch: out.logprobs and out.top_logprobs must be empty or hold ", sampled, " and ",
        sampled * kMaxTopLogprobs, " entries (one row per sampling item)"));
  }
  row = 0;
  for (const PrefillItem& item : batch) {
    if (!item.sample) {
      if (absl::Status s = Prefill(item.slot, item.tokens, {}); !s.ok()) return s;
      continue;
    }
    // Row `row` of `out`; the logprob spans only when the caller gave them.
    SampleOutput one{.tokens = out.tokens.subspan(row, 1)};
    if (!out.logprobs.empty()) one.logprobs = out.logprobs.subspan(row, 1);
    if (!out.top_logprobs.empty()) {
      one.top_logprobs = out.top_logprobs.subspan(row * kMaxTopLogprobs, kMaxTopLogprobs);
    }
    if (absl::Status s = PrefillAndSample(item.slot, item.tokens, one, item.allowed_tokens);
        !s.ok()) {
      return s;
    }
    ++row;
  }
  return absl::OkStatus();
}

}  // namespace linserve
