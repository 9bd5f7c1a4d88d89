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
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "model/tokenizer/tokenizer.h"
#include "model/types.h"

namespace linserve {

class TokenVocabulary {
 public:
  // `eos_token_id` < 0: the model has none (a document then ends at max_new_tokens or when
  // nothing may follow).
  static std::shared_ptr<const TokenVocabulary> Create(const Tokenizer& tokenizer,
                                                       TokenId eos_token_id);

  int32_t vocab_size() const { return static_cast<int32_t>(offsets_.size()) - 1; }
  TokenId eos_token_id() const { return eos_token_id_; }
  // 32-bit words of a token mask: bit (t % 32) of word t / 32 stands for token t.
  int32_t mask_words() const { return (vocab_size() + 31) / 32; }
  // The bytes token `id` adds to the output (empty for specials).
  std::string_view bytes(TokenId id) const;

  // The byte trie of every token with bytes, EOS excepted, in preorder: node 0 is the root (no
  // byte); a node's children follow it, sorted by byte, and its subtree ends at subtree_end. Each
  // node lists the tokens whose bytes end there.
  struct TrieNode {
    uint8_t byte;
    int32_t depth;        // bytes from the root
    int32_t subtree_end;  // the first node after this one's subtree
    int32_t tokens_begin;
    int32_t tokens_end;
  };
  absl::Span<const TrieNode> trie() const { return trie_; }
  absl::Span<const TokenId> tokens(const TrieNode& node) const {
    return absl::MakeConstSpan(trie_tokens_).subspan(node.tokens_begin,
                                                     node.tokens_end - node.tokens_begin);
  }
  // The longest token, in bytes.
  int32_t max_depth() const { return max_depth_; }

 private:
  TokenVocabulary() = default;

  TokenId eos_token_id_ = -1;
  std::string bytes_;                  // every token's bytes, concatenated
  std::vector<int64_t> offsets_{0};    // token t: bytes_[offsets_[t], offsets_[t + 1])
  std::vector<TrieNode> trie_;
  std::vector<TokenId> trie_tokens_;
  int32_t max_depth_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_TOKEN_VOCABULARY_H_
