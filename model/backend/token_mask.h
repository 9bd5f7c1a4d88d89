// Token masks (structured output): which tokens a pick may choose. A mask is ceil(vocab / 32)
// uint32 words; bit (t % 32) of word t / 32 set = token t allowed. Bits past the vocabulary in
// the last word mean nothing. A null mask allows every token.
#ifndef LINSERVE_MODEL_BACKEND_TOKEN_MASK_H_
#define LINSERVE_MODEL_BACKEND_TOKEN_MASK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/types.h"

namespace linserve {

// Words of a mask over `vocab` tokens.
inline constexpr int32_t TokenMaskWords(int32_t vocab) { return (vocab + 31) / 32; }

// Whether `mask` (nullptr = all) allows `token` (in [0, vocab)).
inline bool TokenAllowed(const uint32_t* mask, TokenId token) {
  return mask == nullptr || ((mask[token >> 5] >> (token & 31)) & 1u) != 0;
}

// INVALID_ARGUMENT naming `what` when `mask` (not null) allows no token in [0, vocab).
absl::Status CheckTokenMask(const uint32_t* mask, int32_t vocab, absl::string_view what);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_TOKEN_MASK_H_
