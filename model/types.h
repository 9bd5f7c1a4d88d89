// Basic vocabulary types shared by every layer above kernels/.
#ifndef LINSERVE_MODEL_TYPES_H_
#define LINSERVE_MODEL_TYPES_H_

#include <compare>
#include <cstdint>

namespace linserve {

// A token id in the model's vocabulary: 0 <= id < ModelConfig::vocab_size.
using TokenId = int32_t;

// Index of a state slot in a Backend's pool. Strongly typed so it is never mixed up with a
// session id, a token or a batch row.
struct SlotId {
  int32_t value = -1;
  friend auto operator<=>(const SlotId&, const SlotId&) = default;
};

// One row of a batched decode step: feed `token` to the session whose state lives in `slot`.
struct DecodeItem {
  SlotId slot;
  TokenId token = 0;
  // Read by the sampling calls only (structured output): bit (t % 32) of allowed_tokens[t / 32]
  // set = token t may be picked; ceil(vocab_size / 32) words with at least one bit set, valid
  // until the step is collected. nullptr: every token may be picked.
  const uint32_t* allowed_tokens = nullptr;
  // Launch-ahead (Backend::max_steps_in_flight() == 2): >= 0 feeds, instead of `token`, the
  // token the step launched just before this one (and not yet collected) picks in its row
  // `previous_row`, read where the backend keeps it, so the host need not wait for it. That row
  // must be of the same slot. -1: feed `token`.
  int32_t previous_row = -1;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TYPES_H_
