// No Abseil header may be included here: see the header.
#include "tests/testing/sentencepiece_training.h"

#include <sentencepiece_trainer.h>

#include <cstdio>
#include <random>
#include <string_view>
#include <vector>

namespace linserve {

std::string SentencePieceTestCorpus() {
  static const std::vector<std::string_view> kWords = {
      "the",   "quick",    "brown", "fox",    "jumps",  "over",      "lazy",  "dog",
      "hello", "world",    "naïve", "café",   "résumé", "Ωμέγα",     "λόγος", "日本語",
      "東京",  "テキスト", "😀",     "emoji🎉", "linear", "attention", "state", "token"};
  std::mt19937 rng(2020);
  std::string corpus;
  for (int line = 0; line < 400; ++line) {
    for (int w = 0; w < 10; ++w) {
      if (w > 0) corpus += ' ';
      corpus += kWords[rng() % kWords.size()];
    }
    corpus += '\n';
  }
  return corpus;
}

std::string TrainSentencePiece(const std::string& corpus, int vocab_size,
                               const std::string& model_path) {
  std::vector<std::string> sentences;
  size_t start = 0;
  while (start < corpus.size()) {
    size_t end = corpus.find('\n', start);
    if (end == std::string::npos) end = corpus.size();
    if (end > start) sentences.push_back(corpus.substr(start, end - start));
    start = end + 1;
  }
  // The trainer wants a prefix and appends ".model" (and ".vocab", which is not wanted).
  std::string prefix = model_path;
  const std::string suffix = ".model";
  if (prefix.size() > suffix.size() &&
      prefix.compare(prefix.size() - suffix.size(), suffix.size(), suffix) == 0) {
    prefix.resize(prefix.size() - suffix.size());
  }
  class Iterator : public sentencepiece::SentenceIterator {
   public:
    explicit Iterator(const std::vector<std::string>& s) : s_(s) {}
    bool done() const override { return i_ >= s_.size(); }
    void Next() override { ++i_; }
    const std::string& value() const override { return s_[i_]; }
    sentencepiece::util::Status status() const override { return {}; }

   private:
    const std::vector<std::string>& s_;
    size_t i_ = 0;
  } iterator(sentences);
  const std::string args =
      "--model_prefix=" + prefix + " --vocab_size=" + std::to_string(vocab_size) +
      " --model_type=bpe --byte_fallback=true --character_coverage=1.0 --num_threads=1"
      " --minloglevel=2";
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(args, &iterator);
  if (!status.ok()) return status.ToString();
  std::remove((prefix + ".vocab").c_str());
  if (prefix + ".model" != model_path &&
      std::rename((prefix + ".model").c_str(), model_path.c_str()) != 0) {
    return "cannot rename " + prefix + ".model to " + model_path;
  }
  return "";
}

}  // namespace linserve
