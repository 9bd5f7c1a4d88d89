#include "model/tokenizer/gpt2_bpe_tokenizer.h"

#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/gpt2_pretokenizer.h"
#include "model/tokenizer/utf8.h"

namespace linserve {

Gpt2BpeTokenizer::Gpt2BpeTokenizer(Gpt2BpeVocab vocab, int32_t vocab_size)
    : token_bytes_(std::move(vocab.token_bytes)),
      byte_ids_(vocab.byte_ids),
      vocab_size_(vocab_size) {
  merges_.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const Gpt2BpeVocab::Merge& m = vocab.merges[rank];
    // A pair listed twice keeps its later rank, as in encoder.py's dict and HF's map.
    merges_.insert_or_assign(PairKey(m.left, m.right),
                             MergeRank{static_cast<uint32_t>(rank), m.merged});
  }
}

void Gpt2BpeTokenizer::EncodePiece(std::string_view piece, std::vector<TokenId>& ids) const {
  // The piece's symbols as a linked list over its byte positions; a merge keeps the left
  // symbol's position and unlinks the right one (id -1).
  struct Symbol {
    TokenId id;
    int64_t prev;
    int64_t next;
  };
  const int64_t n = static_cast<int64_t>(piece.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  // Candidate merges, lowest rank first, then leftmost. An entry is stale once either of its
  // symbols changed; it is then skipped.
  struct Candidate {
    uint32_t rank;
    int64_t pos;
    TokenId left;
    TokenId right;
    TokenId merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int64_t pos) {
    const int64_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, pos, symbols[pos].id, symbols[next].id, it->second.merged});
  };
  for (int64_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
    const int64_t right = left.next;
    left.id = c.merged;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    symbols[right].id = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  for (int64_t i = 0; i >= 0 && i < n; i = symbols[i].next) ids.push_back(symbols[i].id);
}

absl::StatusOr<std::vector<TokenId>> Gpt2BpeTokenizer::EncodeAtMost(std::string_view text,
                                                                    size_t max_tokens) const {
  if (std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (at byte ", *bad, ")"));
  }
  const size_t cap = max_tokens == kNoTokenLimit ? kNoTokenLimit : max_tokens + 1;
  std::vector<TokenId> ids;
  for (size_t begin = 0; begin < text.size() && ids.size() < cap;) {
    const size_t end = Gpt2PieceEnd(text, begin);
    EncodePiece(text.substr(begin, end - begin), ids);
    begin = end;
  }
  if (ids.size() > cap) ids.resize(cap);
  return ids;
}

std::string Gpt2BpeTokenizer::TokenBytes(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) return "";
  return token_bytes_[static_cast<size_t>(id)];
}

}  // namespace linserve
