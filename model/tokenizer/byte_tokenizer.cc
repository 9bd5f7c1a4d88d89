#include "model/tokenizer/byte_tokenizer.h"

namespace linserve {

absl::StatusOr<std::vector<TokenId>> ByteTokenizer::EncodeAtMost(std::string_view text,
                                                                 size_t max_tokens) const {
  // One id per byte: the first max_tokens + 1 bytes decide.
  const size_t n = max_tokens < text.size() ? max_tokens + 1 : text.size();
  std::vector<TokenId> ids;
  ids.reserve(n);
  for (char c : text.substr(0, n)) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string ByteTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= kByteIds) return "";
  return std::string(1, static_cast<char>(id));
}

}  // namespace linserve
