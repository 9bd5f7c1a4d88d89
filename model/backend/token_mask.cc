#include "model/backend/token_mask.h"

#include "absl/strings/str_cat.h"

namespace linserve {

absl::Status CheckTokenMask(const uint32_t* mask, int32_t vocab, absl::string_view what) {
  if (mask == nullptr) return absl::OkStatus();
  const int32_t full_words = vocab / 32;
  for (int32_t w = 0; w < full_words; ++w) {
    if (mask[w] != 0) return absl::OkStatus();
  }
  const int32_t tail = vocab % 32;
  if (tail != 0 && (mask[full_words] & ((uint32_t{1} << tail) - 1)) != 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " allows no token of the vocabulary [0, ", vocab, ")"));
}

}  // namespace linserve
