// GPT-2's pre-tokenizer: the split of a text into the pieces BPE then encodes one by one, exactly
// what GPT-2's regex
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches (leftmost alternative first, greedy), written out by hand because RE2 has no
// lookahead. \p{L}, \p{N} and \s are the classes of unicode_class.h (\s is White_Space, as in
// GPT-2's encoder.py and HF tokenizers; JavaScript's \s differs on U+0085 and U+FEFF).
#ifndef LINSERVE_MODEL_TOKENIZER_GPT2_PRETOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_GPT2_PRETOKENIZER_H_

#include <cstddef>
#include <string_view>

namespace linserve {

// The end (byte offset) of the piece that starts at byte `begin` < text.size() of `text`, which
// must be well-formed UTF-8 (FirstInvalidUtf8) with `begin` at a character boundary. The pieces
// of a text are [0, e1), [e1, e2), ... up to text.size().
size_t Gpt2PieceEnd(std::string_view text, size_t begin);

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_GPT2_PRETOKENIZER_H_
