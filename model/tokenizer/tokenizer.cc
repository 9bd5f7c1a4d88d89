#include "model/tokenizer/tokenizer.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace linserve {
namespace {

constexpr char kTokenizerFile[] = "tokenizer.model";

}  // namespace

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

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const ModelConfig& config,
                                                         const std::string& model_dir) {
  switch (config.tokenizer) {
    case TokenizerKind::kByte:
      if (config.vocab_size < ByteTokenizer::kByteIds) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte tokenizer needs vocab_size >= 256, got ", config.vocab_size));
      }
      return std::make_unique<ByteTokenizer>(config.vocab_size);
    case TokenizerKind::kSentencePiece: {
      absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> sp = SentencePieceTokenizer::Load(
          (std::filesystem::path(model_dir) / kTokenizerFile).string(), config.vocab_size);
      if (!sp.ok()) return sp.status();
      return std::unique_ptr<Tokenizer>(*std::move(sp));
    }
  }
  return absl::InvalidArgumentError("unknown tokenizer kind");
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
