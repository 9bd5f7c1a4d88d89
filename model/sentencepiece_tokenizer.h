// SentencePieceTokenizer: a model directory's tokenizer.model, through Debian's libsentencepiece.
// TokenBytes gives each piece's raw bytes (byte-fallback pieces <0xAB> as the byte, ▁ as a
// space, control pieces empty), so concatenating them reproduces the text, including the space
// SentencePiece's dummy prefix puts before the first word (Decode keeps it: decoding is by
// concatenation so that it agrees with StreamingDetokenizer).
#ifndef LINSERVE_MODEL_SENTENCEPIECE_TOKENIZER_H_
#define LINSERVE_MODEL_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "model/sentencepiece_model.h"
#include "model/tokenizer.h"

namespace linserve {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads `path`. NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is not a
  // SentencePiece model or its piece count differs from `expected_vocab_size` (the config's
  // vocab_size); errors name the file.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path,
                                                                      int32_t expected_vocab_size);

  int32_t vocab_size() const override { return static_cast<int32_t>(piece_bytes_.size()); }
  // INVALID_ARGUMENT naming the byte offset when `text` is not well-formed UTF-8.
  absl::StatusOr<std::vector<TokenId>> Encode(std::string_view text) const override;
  // Empty for ids outside the vocabulary.
  std::string TokenBytes(TokenId id) const override;

 private:
  SentencePieceTokenizer(std::string path, std::unique_ptr<SentencePieceModel> model)
      : path_(std::move(path)), model_(std::move(model)), piece_bytes_(model_->PieceBytes()) {}

  std::string path_;
  std::unique_ptr<SentencePieceModel> model_;
  std::vector<std::string> piece_bytes_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_SENTENCEPIECE_TOKENIZER_H_
