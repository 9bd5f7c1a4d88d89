#include "server/constraints/token_vocabulary.h"

#include <algorithm>
#include <numeric>

namespace linserve {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::Create(const Tokenizer& tokenizer,
                                                               TokenId eos_token_id) {
  std::shared_ptr<TokenVocabulary> vocabulary(new TokenVocabulary());
  const int32_t n = tokenizer.vocab_size();
  vocabulary->eos_token_id_ = eos_token_id < n ? eos_token_id : -1;
  vocabulary->offsets_.reserve(n + 1);
  for (TokenId id = 0; id < n; ++id) {
    vocabulary->bytes_ += tokenizer.TokenBytes(id);
    vocabulary->offsets_.push_back(static_cast<int64_t>(vocabulary->bytes_.size()));
  }

  // The trie in preorder: tokens sorted by their bytes, each adding the nodes its bytes do not
  // share with the token before it.
  std::vector<TokenId> order;
  for (TokenId id = 0; id < n; ++id) {
    if (id != vocabulary->eos_token_id_ && !vocabulary->bytes(id).empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return vocabulary->bytes(a) < vocabulary->bytes(b);
  });
  auto& trie = vocabulary->trie_;
  trie.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path{0};  // the nodes of the previous token's bytes, root first
  std::string_view previous;
  for (TokenId id : order) {
    const std::string_view bytes = vocabulary->bytes(id);
    size_t shared = 0;
    while (shared < previous.size() && shared < bytes.size() && previous[shared] == bytes[shared]) {
      ++shared;
    }
    while (path.size() > shared + 1) {
      trie[path.back()].subtree_end = static_cast<int32_t>(trie.size());
      path.pop_back();
    }
    for (size_t i = shared; i < bytes.size(); ++i) {
      const int32_t tokens_at = static_cast<int32_t>(vocabulary->trie_tokens_.size());
      trie.push_back({static_cast<uint8_t>(bytes[i]), static_cast<int32_t>(i + 1), 0, tokens_at,
                      tokens_at});
      path.push_back(static_cast<int32_t>(trie.size()) - 1);
    }
    vocabulary->trie_tokens_.push_back(id);
    trie[path.back()].tokens_end = static_cast<int32_t>(vocabulary->trie_tokens_.size());
    vocabulary->max_depth_ = std::max(vocabulary->max_depth_, static_cast<int32_t>(bytes.size()));
    previous = bytes;
  }
  for (int32_t node : path) trie[node].subtree_end = static_cast<int32_t>(trie.size());
  return vocabulary;
}

std::string_view TokenVocabulary::bytes(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
}

}  // namespace linserve
