// LoadTokenizer: the Tokenizer a model's config names, built from its model directory. The one
// place that knows every concrete tokenizer, so that tokenizer.h stays the interface alone.
#ifndef LINSERVE_MODEL_TOKENIZER_LOAD_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_LOAD_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/format/config.h"
#include "model/tokenizer/tokenizer.h"

namespace linserve {

// Loads the tokenizer a model directory names in its config: tokenizer.model for SentencePiece;
// tokenizer.json, else vocab.json + merges.txt, for gpt2_bpe (gpt2_bpe_files.h); nothing for
// byte and none.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const ModelConfig& config,
                                                         const std::string& model_dir);

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_LOAD_TOKENIZER_H_
