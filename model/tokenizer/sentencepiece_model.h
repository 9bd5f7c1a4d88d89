// SentencePieceModel: the part of linserve that touches libsentencepiece.
//
// Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and exports its symbols,
// while gRPC brings libprotobuf 3.21: loaded into one process the two collide (sentencepiece's
// generated code ends up calling 3.21 and aborts at its version check). So libsentencepiece is
// never linked into our programs: it is linked only into a plugin, liblinserve_sentencepiece.so
// (sentencepiece_plugin.cc), which Load() opens with RTLD_DEEPBIND so that sentencepiece binds
// to its own protobuf whatever else the process has loaded.
//
// Debian's sentencepiece_processor.h also declares `namespace absl { using std::string_view; }`,
// which collides with Debian's Abseil, so this header uses only the standard library.
#ifndef LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace linserve {

// A loaded tokenizer.model. Thread-safe after Load: every method is const.
class SentencePieceModel {
 public:
  // Loads the serialized model at `path`; on failure returns nullptr and sets `error` to the
  // reason (the plugin could not be opened, or SentencePiece's own).
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string& error);
  virtual ~SentencePieceModel() = default;

  virtual int vocab_size() const = 0;
  // Encodes `text` (well-formed UTF-8) to ids; false and `error` on failure.
  virtual bool Encode(std::string_view text, std::vector<int>& ids, std::string& error) const = 0;
  // The bytes each piece stands for, indexed by id: byte-fallback pieces <0xAB> are the byte
  // itself, control pieces (<s>, </s>, ...) are empty, the unknown piece is its surface text
  // (" ⁇ " by default), and every other piece is its text with U+2581 (▁) turned into a space.
  virtual std::vector<std::string> PieceBytes() const = 0;
};

// The plugin's one entry point: a new model, or nullptr with `error` set.
using LoadSentencePieceModelFn = SentencePieceModel* (*)(const char* path, std::string* error);
inline constexpr char kLoadSentencePieceModelSymbol[] = "linserve_load_sentencepiece_model";

}  // namespace linserve

#endif  // LINSERVE_MODEL_TOKENIZER_SENTENCEPIECE_MODEL_H_
