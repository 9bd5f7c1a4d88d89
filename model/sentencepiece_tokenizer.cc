#include "model/sentencepiece_tokenizer.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/utf8.h"

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

absl::StatusOr<std::vector<TokenId>> SentencePieceTokenizer::Encode(std::string_view text) const {
  if (std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (at byte ", *bad, ")"));
  }
  std::vector<int> ids;
  std::string error;
  if (!model_->Encode(text, ids, error)) {
    return absl::InternalError(absl::StrCat(path_, ": encoding failed: ", error));
  }
  return std::vector<TokenId>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return piece_bytes_[static_cast<size_t>(id)];
}

}  // namespace linserve
