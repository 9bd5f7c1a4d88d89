// NoTokenizer: the tokenizer of a model that has none (config tokenizer "none", e.g. a converted
// checkpoint shipped without its tokenizer files). Its ids stand for no text: prompts come as
// token ids and generations go out as token ids (docs/model-format.md, "Tokenizers").
#ifndef LINSERVE_MODEL_TOKENIZER_NO_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_NO_TOKENIZER_H_

#include "model/tokenizer/tokenizer.h"

namespace linserve {

class NoTokenizer final : public Tokenizer {
 public:
  explicit NoTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {}

  int32_t vocab_size() const override { return vocab_size_; }
  bool has_text() const override { return false; }
  // Always INVALID_ARGUMENT: text cannot become ids without a tokenizer.
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override;
  // Always empty.
  std::string TokenBytes(TokenId id) const override;

 private:
  int32_t vocab_size_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_NO_TOKENIZER_H_
