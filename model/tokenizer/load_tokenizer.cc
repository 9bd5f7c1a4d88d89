#include "model/tokenizer/load_tokenizer.h"

#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"

namespace linserve {
namespace {

constexpr char kTokenizerFile[] = "tokenizer.model";

}  // namespace

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

}  // namespace linserve
