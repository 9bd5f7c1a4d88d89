// Trains a small SentencePiece model with libsentencepiece's trainer, for tests that need a
// tokenizer.model. Like model/tokenizer/sentencepiece_model.h, this header and its .cc avoid Abseil (the
// SentencePiece headers collide with Debian's Abseil).
#ifndef LINSERVE_TESTS_TESTING_SENTENCEPIECE_TRAINING_H_
#define LINSERVE_TESTS_TESTING_SENTENCEPIECE_TRAINING_H_

#include <string>

namespace linserve {

// A few hundred lines of mixed-script text (ASCII words, accented Latin, Greek, CJK, emoji):
// enough for a BPE model whose pieces split multi-byte characters in interesting ways.
std::string SentencePieceTestCorpus();

// Trains a BPE model with byte fallback on `corpus` (one sentence per line) and writes it to
// `model_path` (usually DIR/tokenizer.model). `vocab_size` must be at least 259 + the number of
// distinct characters kept (byte fallback reserves 256 pieces, plus <unk>, <s>, </s>).
// Returns "" on success, else SentencePiece's error.
std::string TrainSentencePiece(const std::string& corpus, int vocab_size,
                               const std::string& model_path);

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_SENTENCEPIECE_TRAINING_H_
