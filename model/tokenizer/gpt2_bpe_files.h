// The files a gpt2_bpe model directory carries its tokenizer in: GPT-2's vocab.json (token ->
// id, tokens spelt in GPT-2's byte-to-unicode alphabet) and merges.txt (one merge "a b" per line,
// first rank first, after an optional "#version" line), or HF tokenizers' tokenizer.json
// (model.vocab, model.merges as "a b" strings or [a, b] pairs, special added_tokens). Everything
// is checked: errors are INVALID_ARGUMENT (NOT_FOUND for a missing file) and name the file and
// what in it is wrong.
#ifndef LINSERVE_MODEL_TOKENIZER_GPT2_BPE_FILES_H_
#define LINSERVE_MODEL_TOKENIZER_GPT2_BPE_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/gpt2_bpe_tokenizer.h"

namespace linserve {

inline constexpr char kGpt2VocabFile[] = "vocab.json";
inline constexpr char kGpt2MergesFile[] = "merges.txt";
inline constexpr char kHfTokenizerFile[] = "tokenizer.json";
// The special token of vocab.json when it has one (GPT-2: id 50256).
inline constexpr char kGpt2EndOfText[] = "<|endoftext|>";

// vocab.json + merges.txt. The one special token is <|endoftext|>, when present.
absl::StatusOr<Gpt2BpeVocab> ReadGpt2VocabAndMerges(const std::string& vocab_path,
                                                    const std::string& merges_path);
// A tokenizer.json with a byte-level BPE model: model.type "BPE", no normalizer, a ByteLevel
// pre_tokenizer without add_prefix_space, no ignore_merges, no dropout, no subword affixes; its
// added_tokens must be special.
absl::StatusOr<Gpt2BpeVocab> ReadHfTokenizerJson(const std::string& path);
// A model directory's: tokenizer.json when it has one, else vocab.json + merges.txt.
absl::StatusOr<Gpt2BpeVocab> ReadGpt2BpeFiles(const std::string& model_dir);

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_GPT2_BPE_FILES_H_
