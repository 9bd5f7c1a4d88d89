#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace linserve {

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path, int32_t expected_vocab_size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": no such file; config.json says tokenizer \"sentencepiece\", which needs it"));
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> model = SentencePieceModel::Load(path, error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a SentencePiece model: ", error));
  }
  if (model->vocab_size() != expected_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": has ", model->vocab_size(),
                                                   " pieces but config.json vocab_size is ",
                                                   expected_vocab_size, "; they must be equal"));
  }
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(path, std::move(model)));
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::FromModel(
    std::string name, std::unique_ptr<SentencePieceModel> model) {
  return std::unique_ptr<SentencePieceTokenizer>(
      new SentencePieceTokenizer(std::move(name), std::move(model)));
}

absl::StatusOr<size_t> SentencePieceTokenizer::EncodeChunk(std::string_view text, size_t cap,
                                                           std::vector<TokenId>& ids) const {
  std::vector<int> encoded;
  std::string error;
  if (!model_->Encode(text, encoded, error)) {
    return absl::InternalError(absl::StrCat(path_, ": encoding failed: ", error));
  }
  const size_t room = cap > ids.size() ? cap - ids.size() : 0;
  ids.insert(ids.end(), encoded.begin(),
             encoded.begin() + static_cast<ptrdiff_t>(std::min(room, encoded.size())));
  return encoded.size();
}

absl::StatusOr<std::vector<TokenId>> SentencePieceTokenizer::EncodeAtMost(std::string_view text,
                                                                          size_t max_tokens) const {
  if (std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (at byte ", *bad, ")"));
  }
  const size_t cap = max_tokens == kNoTokenLimit ? kNoTokenLimit : max_tokens + 1;
  std::vector<TokenId> ids;
  if (max_tokens != kNoTokenLimit && text.size() > 2 * kCountChunkBytes) {
    // Count chunk by chunk. Cut before a space: with split_by_whitespace (SentencePiece's
    // default) no piece spans one, so the chunks' counts add up to the whole text's, give or
    // take what normalisation does at the cut. Without a space nearby, cut between characters.
    size_t total = 0;
    size_t cuts = 0;
    for (size_t begin = 0; begin < text.size();) {
      size_t end = text.size();
      if (text.size() - begin > 2 * kCountChunkBytes) {
        end = begin + kCountChunkBytes;
        const size_t space = text.substr(end, kCountChunkBytes).find(' ');
        if (space != std::string_view::npos) {
          end += space;
        } else {
          while ((static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
        }
      }
      if (end < text.size()) ++cuts;
      absl::StatusOr<size_t> n = EncodeChunk(text.substr(begin, end - begin), cap, ids);
      if (!n.ok()) return n.status();
      total += *n;
      if (total > max_tokens && total - max_tokens > kBoundarySlackTokens * cuts) return ids;
      begin = end;
    }
    // Within the limit up to the slack: only the whole text's encoding is exact.
    ids.clear();
  }
  absl::StatusOr<size_t> n = EncodeChunk(text, cap, ids);
  if (!n.ok()) return n.status();
  return ids;
}

std::string SentencePieceTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return piece_bytes_[static_cast<size_t>(id)];
}

}  // namespace linserve
