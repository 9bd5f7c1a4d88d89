// TokenVocabulary: the model's tokens as the bytes they add to the output, indexed for token
// masks (a byte trie, built once per model and shared by every compiled constraint).
// A token with no bytes (BOS, UNK, EOS and other specials) is never allowed under a constraint,
// except EOS where the document may end. Bytes are exactly Tokenizer::TokenBytes: SentencePiece's
// whitespace marker is already a space there, a byte-fallback piece is its byte, and a GPT-2
// byte token may be part of a UTF-8 character.
//
// Immutable after Create: thread-safe.
#ifndef LINSERVE_SERVER_CONSTRAINTS_TOKEN_VOCABULARY_H_
#define LINSERVE_SERVER_CONSTRAINTS_TOKEN_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "model/tokenizer/tokenizer.h"
#include "model/types.h"

namespace linserve {

class TokenVocabulary {
 public:
  // `eos_token_id` < 0: the model has none (a document then ends at max_new_tokens or when
  // nothing may follow).
  static std::shared_ptr<const TokenVocabulary> Create(const Tokenizer& tokenizer,
                                                       TokenId eos_token_id);

  int32_t vocab_size() const;
  TokenId eos_token_id() const;
  // 32-bit words of a token mask: bit (t % 32) of word t / 32 stands for token t.
  int32_t mask_words() const { return (vocab_size() + 31) / 32; }
  // The bytes token `id` adds to the output (empty for specials).
  std::string_view bytes(TokenId id) const;

  // Implementations add their index (the trie) below.
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_TOKEN_VOCABULARY_H_
