#include "model/tokenizer/no_tokenizer.h"

#include "absl/status/status.h"

namespace linserve {

absl::StatusOr<std::vector<TokenId>> NoTokenizer::EncodeAtMost(std::string_view /*text*/,
                                                               size_t /*max_tokens*/) const {
  return absl::InvalidArgumentError(
      "this model has no tokenizer (config.json tokenizer \"none\"): send the prompt as token "
      "ids");
}

std::string NoTokenizer::TokenBytes(TokenId /*id*/) const { return ""; }

}  // namespace linserve
