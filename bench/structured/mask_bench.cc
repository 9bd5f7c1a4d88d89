// The cost of structured output's token masks (issue 27). For each vocabulary (the bundled
// model's SentencePiece vocabulary; with --gpt2_dir, GPT-2's BPE vocabulary of the Based models):
// a seeded random walk through JSON documents, each step taking a token uniformly among those
// the mask allows (so most steps are inside strings, where nearly every token is allowed: the
// mask's worst case). Per step it times FillMask uncached (the state restored into a freshly
// compiled constraint, so the mask cache is empty), FillMask cached (the same state again) and
// Accept. Prints one JSON object; bench/results/structured.md records the figures.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "model/tokenizer/gpt2_bpe_files.h"
#include "model/tokenizer/gpt2_bpe_tokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/grammar_matcher.h"

ABSL_FLAG(std::string, sentencepiece_model,
          LINSERVE_SOURCE_DIR "/models/shakespeare-linear/tokenizer.model",
          "The SentencePiece model (the bundled model's: vocabulary 2048, eos 2).");
ABSL_FLAG(int32_t, sentencepiece_vocab_size, 2048, "Its vocabulary size.");
ABSL_FLAG(int32_t, sentencepiece_eos, 2, "Its eos id.");
ABSL_FLAG(std::string, gpt2_dir, "",
          "A directory with GPT-2's vocab.json and merges.txt (eos 50256); empty: skipped.");
ABSL_FLAG(int32_t, steps, 300, "Tokens of the random walk per vocabulary.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the walk.");

namespace linserve {
namespace {

constexpr char kJsonGrammar[] = R"(root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*
)";

using Clock = std::chrono::steady_clock;
double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

nlohmann::json Summary(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  const auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  return {{"mean_us", sum / us.size()}, {"p50_us", at(0.5)}, {"p99_us", at(0.99)},
          {"max_us", us.back()}};
}

std::shared_ptr<const CompiledConstraint> Compile(
    const std::shared_ptr<const TokenVocabulary>& vocabulary) {
  auto compiled = CompileConstraint({ConstraintKind::kGrammar, kJsonGrammar}, vocabulary,
                                    ConstraintLimits{}, "grammar");
  if (!compiled.ok()) {
    std::cerr << compiled.status() << "\n";
    std::exit(1);
  }
  return *compiled;
}

nlohmann::json Run(const Tokenizer& tokenizer, TokenId eos) {
  const auto build_start = Clock::now();
  const auto vocabulary = TokenVocabulary::Create(tokenizer, eos);
  const double build_us = Micros(Clock::now() - build_start);
  const auto compile_start = Clock::now();
  auto compiled = Compile(vocabulary);
  const double compile_us = Micros(Clock::now() - compile_start);

  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  GrammarMatcher matcher(compiled);
  std::vector<uint32_t> mask(vocabulary->mask_words()), again(mask.size());
  std::vector<double> uncached, cached, accept;
  std::vector<TokenId> allowed;
  int64_t allowed_total = 0;
  int documents = 0;
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    auto fresh = GrammarMatcher::Deserialize(Compile(vocabulary), matcher.Serialize());
    if (!fresh.ok()) {
      std::cerr << fresh.status() << "\n";
      std::exit(1);
    }
    auto start = Clock::now();
    if (!fresh->FillMask(absl::MakeSpan(mask)).ok()) std::exit(1);
    uncached.push_back(Micros(Clock::now() - start));
    start = Clock::now();
    if (!fresh->FillMask(absl::MakeSpan(again)).ok() || again != mask) std::exit(1);
    cached.push_back(Micros(Clock::now() - start));

    allowed.clear();
    for (TokenId t = 0; t < vocabulary->vocab_size(); ++t) {
      if ((mask[t / 32] >> (t % 32)) & 1) allowed.push_back(t);
    }
    allowed_total += static_cast<int64_t>(allowed.size());
    const TokenId next = allowed[rng() % allowed.size()];
    if (next == eos || matcher.IsComplete()) {
      matcher = GrammarMatcher(compiled);
      ++documents;
      continue;
    }
    start = Clock::now();
    if (!matcher.Accept(next).ok()) std::exit(1);
    accept.push_back(Micros(Clock::now() - start));
  }
  // Fixed states, each prefix tokenized and accepted: FillMask uncached, the best of 5 (the
  // machine may be shared) and the tokens allowed there.
  nlohmann::json states = nlohmann::json::object();
  for (const char* prefix : {"", "{\"na", "{\"name\": \"Ab", "{\"a\": 12", "{\"a\": [1, ",
                             "[[[[[[[[[[{\"k\": tr"}) {
    auto tokens = tokenizer.Encode(prefix);
    GrammarMatcher at(compiled);
    bool ok = tokens.ok();
    for (TokenId t : ok ? *tokens : std::vector<TokenId>{}) ok = ok && at.Accept(t).ok();
    if (!ok) {
      std::cerr << "cannot reach the state " << prefix << "\n";
      std::exit(1);
    }
    double best = 1e300;
    for (int repeat = 0; repeat < 5; ++repeat) {
      auto fresh = GrammarMatcher::Deserialize(Compile(vocabulary), at.Serialize());
      if (!fresh.ok()) std::exit(1);
      const auto start = Clock::now();
      if (!fresh->FillMask(absl::MakeSpan(mask)).ok()) std::exit(1);
      best = std::min(best, Micros(Clock::now() - start));
    }
    int64_t count = 0;
    for (uint32_t word : mask) count += __builtin_popcount(word);
    states[prefix] = {{"fill_mask_uncached_best_us", best}, {"allowed_tokens", count}};
  }
  return {{"vocab_size", vocabulary->vocab_size()},
          {"states", states},
          {"trie_nodes", vocabulary->trie().size()},
          {"vocabulary_build_us", build_us},
          {"json_grammar_compile_us", compile_us},
          {"steps", absl::GetFlag(FLAGS_steps)},
          {"documents_ended", documents},
          {"mean_allowed_tokens", static_cast<double>(allowed_total) / absl::GetFlag(FLAGS_steps)},
          {"fill_mask_uncached", Summary(uncached)},
          {"fill_mask_cached", Summary(cached)},
          {"accept", Summary(accept)}};
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  using namespace linserve;
  absl::ParseCommandLine(argc, argv);
  nlohmann::json out;
  auto sentencepiece = SentencePieceTokenizer::Load(absl::GetFlag(FLAGS_sentencepiece_model),
                                                    absl::GetFlag(FLAGS_sentencepiece_vocab_size));
  if (!sentencepiece.ok()) {
    std::cerr << sentencepiece.status() << "\n";
    return 1;
  }
  out["sentencepiece"] = Run(**sentencepiece, absl::GetFlag(FLAGS_sentencepiece_eos));
  if (!absl::GetFlag(FLAGS_gpt2_dir).empty()) {
    auto vocab = ReadGpt2BpeFiles(absl::GetFlag(FLAGS_gpt2_dir));
    if (!vocab.ok()) {
      std::cerr << vocab.status() << "\n";
      return 1;
    }
    Gpt2BpeTokenizer gpt2(*std::move(vocab), 50257);
    out["gpt2_bpe"] = Run(gpt2, 50256);
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
