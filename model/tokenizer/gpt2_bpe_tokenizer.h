// Gpt2BpeTokenizer: GPT-2's byte-level BPE. A text (well-formed UTF-8) is split into pieces by
// GPT-2's pre-tokenizer (gpt2_pretokenizer.h); each piece starts as one token per byte and is
// merged pairwise, the pair of lowest merge rank first (leftmost among equals), until no
// adjacent pair has a merge: HF tokenizers' algorithm, which gives what GPT-2's encoder.py gives
// for any merge list a BPE training produced. Special tokens (<|endoftext|>) stand for no bytes
// and never come out of Encode: text that spells one is encoded as text. Built from a model
// directory's files by gpt2_bpe_files.h.
#ifndef LINSERVE_MODEL_TOKENIZER_GPT2_BPE_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_GPT2_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/tokenizer/tokenizer.h"

namespace linserve {

// A vocabulary and its merges, checked by the loader.
struct Gpt2BpeVocab {
  struct Merge {
    TokenId left;
    TokenId right;
    TokenId merged;  // the token of left's bytes followed by right's
  };
  // The bytes of each id; empty for special tokens and ids the files do not use.
  std::vector<std::string> token_bytes;
  // The token of each single byte.
  std::array<TokenId, 256> byte_ids{};
  // In rank order (the first merges first).
  std::vector<Merge> merges;
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // `vocab_size` (config.json's) >= vocab.token_bytes.size(); ids past the files' vocabulary
  // (a padded embedding) stand for no bytes.
  Gpt2BpeTokenizer(Gpt2BpeVocab vocab, int32_t vocab_size);

  int32_t vocab_size() const override { return vocab_size_; }
  // INVALID_ARGUMENT naming the byte offset when `text` is not well-formed UTF-8. Time is
  // O(n log n) in the longest piece; with a limit, stops after the piece that passes it.
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override;
  // Empty for specials, unused ids and ids outside the vocabulary.
  std::string TokenBytes(TokenId id) const override;

 private:
  struct MergeRank {
    uint32_t rank;
    TokenId merged;
  };
  static uint64_t PairKey(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // Appends the tokens of one piece.
  void EncodePiece(std::string_view piece, std::vector<TokenId>& ids) const;

  std::vector<std::string> token_bytes_;
  std::array<TokenId, 256> byte_ids_;
  absl::flat_hash_map<uint64_t, MergeRank> merges_;  // PairKey -> rank and result
  int32_t vocab_size_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_GPT2_BPE_TOKENIZER_H_
