#include "model/tokenizer/tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace linserve {

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const TokenId> ids) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size(), ")"));
    }
    bytes += TokenBytes(ids[i]);
  }
  std::string text;
  AppendRepairedUtf8(bytes, /*final=*/true, text);
  return text;
}

std::string StreamingDetokenizer::Push(TokenId id) {
  pending_ += tokenizer_.TokenBytes(id);
  std::string text;
  pending_.erase(0, AppendRepairedUtf8(pending_, /*final=*/false, text));
  return text;
}

std::string StreamingDetokenizer::Flush() {
  std::string text;
  AppendRepairedUtf8(pending_, /*final=*/true, text);
  pending_.clear();
  return text;
}

}  // namespace linserve
