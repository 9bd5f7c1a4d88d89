// SentencePieceModel: the part of linserve that touches libsentencepiece.
//
// Debian's sentencepiece_processor.h declares `namespace absl { using std::string_view; }`, which
// collides with Debian's Abseil (built with its own absl::string_view class), so no translation
// unit may include both. This wrapper's header uses only the standard library, and its .cc
// includes SentencePiece and no Abseil; SentencePieceTokenizer builds on it.
#ifndef LINSERVE_MODEL_SENTENCEPIECE_MODEL_H_
#define LINSERVE_MODEL_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace linserve {

// A loaded tokenizer.model. Thread-safe after Load: every method is const.
class SentencePieceModel {
 public:
  // Loads the serialized model at `path`; on failure returns nullptr and sets `error` to
  // SentencePiece's reason.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string& error);
  ~SentencePieceModel();

  int vocab_size() const;
  // Encodes `text` (well-formed UTF-8) to ids; false and `error` on failure.
  bool Encode(std::string_view text, std::vector<int>& ids, std::string& error) const;
  // The bytes each piece stands for, indexed by id: byte-fallback pieces <0xAB> are the byte
  // itself, control pieces (<s>, </s>, ...) are empty, the unknown piece is its surface text
  // (" ⁇ " by default), and every other piece is its text with U+2581 (▁) turned into a space.
  std::vector<std::string> PieceBytes() const;

 private:
  explicit SentencePieceModel(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor);

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_SENTENCEPIECE_MODEL_H_
