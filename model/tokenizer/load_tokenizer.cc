#include "model/tokenizer/load_tokenizer.h"

#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/gpt2_bpe_files.h"
#include "model/tokenizer/gpt2_bpe_tokenizer.h"
#include "model/tokenizer/no_tokenizer.h"
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
    case TokenizerKind::kGpt2Bpe: {
      absl::StatusOr<Gpt2BpeVocab> vocab = ReadGpt2BpeFiles(model_dir);
      if (!vocab.ok()) return vocab.status();
      // A model may pad its embedding past the tokenizer's vocabulary (GPT-2's 50257 to 50264).
      if (vocab->token_bytes.size() > static_cast<size_t>(config.vocab_size)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json vocab_size is ", config.vocab_size, " but the gpt2_bpe tokenizer in ",
            model_dir, " has ", vocab->token_bytes.size(),
            " tokens; vocab_size must be at least that"));
      }
      return std::make_unique<Gpt2BpeTokenizer>(*std::move(vocab), config.vocab_size);
    }
    case TokenizerKind::kNone:
      return std::make_unique<NoTokenizer>(config.vocab_size);
  }
  return absl::InvalidArgumentError("unknown tokenizer kind");
}

}  // namespace linserve
