// SentencePieceTokenizer: a model directory's tokenizer.model, through Debian's libsentencepiece.
// TokenBytes gives each piece's raw bytes (byte-fallback pieces <0xAB> as the byte, ▁ as a
// space, control pieces empty), so concatenating them reproduces the text, including the space
// SentencePiece's dummy prefix puts before the first word (Decode keeps it: decoding is by
// concatenation so that it agrees with StreamingDetokenizer).
#ifndef LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/sentencepiece_model.h"
#include "model/tokenizer/tokenizer.h"

namespace linserve {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads `path`. NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is not a
  // SentencePiece model or its piece count differs from `expected_vocab_size` (the config's
  // vocab_size); errors name the file.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path,
                                                                      int32_t expected_vocab_size);
  // Over an already loaded model; `name` stands for the file in error messages.
  static std::unique_ptr<SentencePieceTokenizer> FromModel(
      std::string name, std::unique_ptr<SentencePieceModel> model);

  int32_t vocab_size() const override { return static_cast<int32_t>(piece_bytes_.size()); }
  // INVALID_ARGUMENT naming the byte offset when `text` is not well-formed UTF-8.
  //
  // libsentencepiece encodes a whole text at once (its memory grows with the text, ~140 bytes
  // per byte), so with a limit a text over 2 * kCountChunkBytes is first counted in chunks of
  // about kCountChunkBytes, each cut before a space where there is one: counting stops as soon
  // as the chunks' tokens exceed `max_tokens` by more than kBoundarySlackTokens per cut (the
  // most a cut could change the count by re-splitting the text around it). A text that passes
  // the count is then encoded whole, so ids and the decision near the limit are exactly
  // Encode's; only a text far over the limit is refused on the chunks' count.
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override;
  // Empty for ids outside the vocabulary.
  std::string TokenBytes(TokenId id) const override;

  // Bytes SentencePiece is given at once while counting (a cut may move up to this much
  // further, to the next space).
  static constexpr size_t kCountChunkBytes = size_t{1} << 16;
  // Tokens by which a cut may change the chunks' count from the whole text's.
  static constexpr size_t kBoundarySlackTokens = 4;

 private:
  SentencePieceTokenizer(std::string path, std::unique_ptr<SentencePieceModel> model)
      : path_(std::move(path)), model_(std::move(model)), piece_bytes_(model_->PieceBytes()) {}

  // Appends the ids of `text` (well-formed UTF-8) to `ids`, at most up to `cap` in all;
  // returns how many ids `text` has.
  absl::StatusOr<size_t> EncodeChunk(std::string_view text, size_t cap,
                                     std::vector<TokenId>& ids) const;

  std::string path_;
  std::unique_ptr<SentencePieceModel> model_;
  std::vector<std::string> piece_bytes_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
