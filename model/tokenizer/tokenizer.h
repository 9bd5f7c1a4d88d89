// Tokenizer: text <-> token ids, the interface. Four implementations: ByteTokenizer (one id per
// byte, plus specials), SentencePieceTokenizer (Debian's libsentencepiece), Gpt2BpeTokenizer
// (GPT-2's byte-level BPE) and NoTokenizer (a model without one: ids only); LoadTokenizer
// (load_tokenizer.h) picks one.
#ifndef LINSERVE_MODEL_TOKENIZER_TOKENIZER_H_
#define LINSERVE_MODEL_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/types.h"

namespace linserve {

// Thread-safe after construction: every method is const.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // `max_tokens` of EncodeAtMost that sets no limit.
  static constexpr size_t kNoTokenLimit = std::numeric_limits<size_t>::max();

  virtual int32_t vocab_size() const = 0;
  // False for NoTokenizer: no id stands for text, Encode always fails, and the server serves
  // token ids only (no text prompts, stop strings or structured output).
  virtual bool has_text() const { return true; }
  // Encodes text without adding BOS/EOS. Invalid UTF-8 is an error for SentencePiece and GPT-2
  // BPE. Time and memory grow with the text: callers serving untrusted text use EncodeAtMost.
  absl::StatusOr<std::vector<TokenId>> Encode(std::string_view text) const {
    return EncodeAtMost(text, kNoTokenLimit);
  }
  // Encode with a bound on the work: a text of at most `max_tokens` tokens gives exactly
  // Encode(text); a longer one gives max_tokens + 1 ids (only their number is meaningful: "too
  // long"), and tokenizing stops soon after more than `max_tokens` tokens are certain, so the
  // ids held never exceed max_tokens + 1 plus one internal chunk's worth. The same errors as
  // Encode.
  virtual absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                            size_t max_tokens) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character; empty for specials).
  virtual std::string TokenBytes(TokenId id) const = 0;
  // Decodes a whole sequence: the concatenated TokenBytes, with ill-formed UTF-8 replaced by
  // U+FFFD (exactly what a StreamingDetokenizer emits for the same ids). Ids out of range are an
  // error naming the position.
  absl::StatusOr<std::string> Decode(absl::Span<const TokenId> ids) const;
};

// Turns a stream of tokens into text that only ever contains complete UTF-8 characters:
// bytes of a character split across tokens are held back until the character is complete.
// Not thread-safe; one per generation stream.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Returns the text that became complete with this token (possibly empty). Bytes that can no
  // longer start or continue a character are emitted as U+FFFD at once rather than held.
  std::string Push(TokenId id);
  // Returns what is still held back, with invalid bytes replaced by U+FFFD; resets.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_TOKENIZER_H_
