// ByteTokenizer: ids 0..255 are the bytes of the text; ids 256..vocab_size-1 are specials (BOS,
// EOS, ...) that stand for no bytes. Any byte string encodes, so Encode never fails.
#ifndef LINSERVE_MODEL_TOKENIZER_BYTE_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_BYTE_TOKENIZER_H_

#include "model/tokenizer/tokenizer.h"

namespace linserve {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kByteIds = 256;

  // `vocab_size` >= kByteIds (ParseModelConfig guarantees it for byte-tokenizer configs).
  explicit ByteTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {}

  int32_t vocab_size() const override { return vocab_size_; }
  // Never fails; reads at most max_tokens + 1 bytes of `text`.
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override;
  // One byte for ids below 256; empty for specials and for ids outside the vocabulary.
  std::string TokenBytes(TokenId id) const override;

 private:
  int32_t vocab_size_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_BYTE_TOKENIZER_H_
