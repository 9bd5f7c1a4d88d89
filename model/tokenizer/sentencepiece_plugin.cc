// liblinserve_sentencepiece.so: SentencePieceModel over libsentencepiece, loaded by
// SentencePieceModel::Load (sentencepiece_model.cc). No Abseil header may be included here:
// see sentencepiece_model.h.
#include "model/tokenizer/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <utility>

namespace linserve {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's space

class LibSentencePieceModel final : public SentencePieceModel {
 public:
  explicit LibSentencePieceModel(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor)
      : processor_(std::move(processor)) {}

  int vocab_size() const override { return processor_->GetPieceSize(); }
  bool Encode(std::string_view text, std::vector<int>& ids, std::string& error) const override;
  std::vector<std::string> PieceBytes() const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

bool LibSentencePieceModel::Encode(std::string_view text, std::vector<int>& ids,
                                   std::string& error) const {
  const sentencepiece::util::Status status = processor_->Encode(text, &ids);
  if (!status.ok()) {
    error = status.ToString();
    return false;
  }
  return true;
}

std::vector<std::string> LibSentencePieceModel::PieceBytes() const {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size()));
  for (int id = 0; id < vocab_size(); ++id) {
    std::string& out = bytes[static_cast<size_t>(id)];
    const std::string& piece = processor_->IdToPiece(id);
    if (processor_->IsControl(id)) continue;
    if (processor_->IsUnknown(id)) {
      // The decoder renders the unknown piece as the model's unk_surface.
      out = processor_->DecodeIds({id});
      continue;
    }
    if (processor_->IsByte(id)) {
      // "<0xAB>": the one byte it stands for.
      out.push_back(static_cast<char>(std::strtoul(piece.substr(3, 2).c_str(), nullptr, 16)));
      continue;
    }
    size_t start = 0;
    while (true) {
      const size_t found = piece.find(kSpaceSymbol, start);
      out.append(piece, start, found == std::string::npos ? std::string::npos : found - start);
      if (found == std::string::npos) break;
      out.push_back(' ');
      start = found + kSpaceSymbol.size();
    }
  }
  return bytes;
}

}  // namespace
}  // namespace linserve

extern "C" __attribute__((visibility("default"))) linserve::SentencePieceModel*
linserve_load_sentencepiece_model(const char* path, std::string* error) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = processor->Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return new linserve::LibSentencePieceModel(std::move(processor));
}
