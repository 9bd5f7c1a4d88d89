#include "model/byte_tokenizer.h"

namespace linserve {

absl::StatusOr<std::vector<TokenId>> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string ByteTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= kByteIds) return "";
  return std::string(1, static_cast<char>(id));
}

}  // namespace linserve
