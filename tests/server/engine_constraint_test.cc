// Structured output in the engine and the sessions, with GBNF grammars on a tiny random model
// (byte tokenizer: one token a byte) and the CPU backend, in every engine loop (synchronous,
// pipelined, launch-ahead): every output is a valid document (checked by feeding it again to a
// fresh matcher), EOS comes only where a document may end, a whole document ends the request
// with kConstraintComplete, and a session's document continues across requests, forks, export
// and import, rewinds and restarts, or starts anew with another constraint or none.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/cpu/cpu_backend.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/grammar_matcher.h"
#include "server/constraints/token_vocabulary.h"
#include "server/engine/engine.h"
#include "server/sessions/session_record.h"
#include "server/sessions/snapshot.h"
#include "server/storage/file_system.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// At most 13 bytes, at least 5: "{a:1}" ... "{a:1,b:2,c:3}". Nothing may follow a whole one, so
// it ends without EOS.
const ConstraintSpec kObject = {
    .kind = ConstraintKind::kGrammar,
    .text = "root ::= \"{\" pair (\",\" pair)? (\",\" pair)? \"}\"\n"
            "pair ::= [a-z] \":\" [0-9]\n"};
// "x" then up to 8 digits: it may end (EOS) after every byte, and must after the eighth digit.
const ConstraintSpec kDigits = {.kind = ConstraintKind::kGrammar,
                                .text = "root ::= \"x\" [0-9]{0,8}\n"};

class EngineConstraintTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  std::unique_ptr<Engine> Start(EngineOptions options = {}) {
    BackendOptions backend_options;
    backend_options.max_slots = 8;
    backend_options.num_threads = 1;
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(model_, backend_options);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    if (!cpu.ok()) return nullptr;
    std::unique_ptr<Backend> backend = *std::move(cpu);
    backend = BackendForLoop(std::move(backend), GetParam());
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static std::shared_ptr<const CompiledConstraint> Compile(Engine& engine,
                                                           const ConstraintSpec& spec) {
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
        engine.constraints().Get(spec, "constraint.grammar");
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    return compiled.ok() ? *std::move(compiled) : nullptr;
  }

  // A turn at temperature 1 under `spec` (none when nullptr).
  static GenerateRequest Turn(Engine& engine, const ConstraintSpec* spec, int32_t max_new_tokens,
                              uint64_t seed, std::optional<SessionId> session = std::nullopt) {
    GenerateRequest r;
    r.request_id = "constrained";
    r.prompt = {'{', 'q', '}'};
    r.max_new_tokens = max_new_tokens;
    r.sampling.seed = seed;
    r.sampling.temperature = 1.0f;
    r.session_id = std::move(session);
    if (spec != nullptr) r.constraint = Compile(engine, *spec);
    return r;
  }

  // Feeds `tokens` to a fresh matcher of `spec`: the matcher after them, or the refusal.
  static absl::StatusOr<GrammarMatcher> Replay(Engine& engine, const ConstraintSpec& spec,
                                               const std::vector<TokenId>& tokens) {
    GrammarMatcher matcher(Compile(engine, spec));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (absl::Status s = matcher.Accept(tokens[i]); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("token ", i, " (", tokens[i], "): ",
                                                   s.message()));
      }
    }
    return matcher;
  }

  // `tokens` are one whole document of `spec`, and the request that ended it said so.
  static void ExpectWholeDocument(Engine& engine, const ConstraintSpec& spec,
                                  const std::vector<TokenId>& tokens, const Outcome& last) {
    ASSERT_TRUE(last.status.ok()) << last.status;
    absl::StatusOr<GrammarMatcher> matcher = Replay(engine, spec, tokens);
    ASSERT_TRUE(matcher.ok()) << matcher.status();
    EXPECT_TRUE(matcher->ended() || matcher->IsComplete());
    EXPECT_EQ(last.result.reason, FinishReason::kConstraintComplete);
  }

  static std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  static constexpr TokenId kEos = 257;  // TinyConfig's
  Model model_ = MakeRandomModel(TinyConfig(), 3);
  MetricsRegistry metrics_;
};

INSTANTIATE_TEST_SUITE_P(Loops, EngineConstraintTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

TEST_P(EngineConstraintTest, EveryOutputIsAWholeDocument) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    const Outcome out = RunRequest(*engine, Turn(*engine, &kObject, 32, seed));
    ExpectWholeDocument(*engine, kObject, out.tokens, out);
    ASSERT_FALSE(out.tokens.empty());
    EXPECT_NE(out.tokens.back(), kEos);  // nothing may follow, not even EOS
    EXPECT_EQ(out.text, std::string(out.tokens.begin(), out.tokens.end()));
  }
}

TEST_P(EngineConstraintTest, EosComesOnlyWhereTheDocumentMayEnd) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  int ended_by_eos = 0;
  int ended_by_length = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(seed);
    const Outcome out = RunRequest(*engine, Turn(*engine, &kDigits, 32, seed));
    ExpectWholeDocument(*engine, kDigits, out.tokens, out);
    ASSERT_FALSE(out.tokens.empty());
    for (size_t i = 0; i + 1 < out.tokens.size(); ++i) EXPECT_NE(out.tokens[i], kEos);
    if (out.tokens.back() == kEos) {
      ++ended_by_eos;
    } else {
      EXPECT_EQ(out.tokens.size(), 9u);  // "x" and 8 digits: nothing may follow
      ++ended_by_length;
    }
  }
  EXPECT_GT(ended_by_eos, 0);
  EXPECT_GT(ended_by_length + ended_by_eos, 0);
}

TEST_P(EngineConstraintTest, TopLogprobsAreTheAllowedTokensOnly) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  GenerateRequest request = Turn(*engine, &kObject, 32, 7);
  request.top_logprobs = 5;
  const Outcome out = RunRequest(*engine, std::move(request));
  ExpectWholeDocument(*engine, kObject, out.tokens, out);
  ASSERT_EQ(out.details.size(), out.tokens.size());
  GrammarMatcher matcher(Compile(*engine, kObject));
  std::vector<uint32_t> mask(static_cast<size_t>(matcher.constraint().vocabulary().mask_words()));
  bool fewer_than_asked = false;
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(matcher.FillMask(absl::MakeSpan(mask)).ok());
    const GeneratedToken& token = out.details[i];
    EXPECT_TRUE(std::isfinite(token.logprob));
    EXPECT_FALSE(token.top_logprobs.empty());
    fewer_than_asked |= token.top_logprobs.size() < 5;
    for (const TokenLogprob& alt : token.top_logprobs) {
      EXPECT_TRUE(std::isfinite(alt.logprob));
      EXPECT_TRUE((mask[static_cast<size_t>(alt.token) / 32] >> (alt.token % 32)) & 1u)
          << "alternative " << alt.token << " is not allowed";
    }
    ASSERT_TRUE(matcher.Accept(out.tokens[i]).ok());
  }
  EXPECT_TRUE(fewer_than_asked);  // "{", ":" and "}" positions allow one token
}

TEST_P(EngineConstraintTest, MaxNewTokensCutsADocumentThatTheNextRequestContinues) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  const Outcome cut = RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id));
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  EXPECT_EQ(cut.result.reason, FinishReason::kLength);
  ASSERT_EQ(cut.tokens.size(), 3u);
  const Outcome rest = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, rest.tokens), rest);
  // The document is whole: the next request starts another.
  const Outcome next = RunRequest(*engine, Turn(*engine, &kObject, 32, 3, id));
  ExpectWholeDocument(*engine, kObject, next.tokens, next);
}

TEST_P(EngineConstraintTest, AnotherConstraintOrNoneStartsANewDocument) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id)).status.ok());
  const Outcome digits = RunRequest(*engine, Turn(*engine, &kDigits, 32, 2, id));
  ExpectWholeDocument(*engine, kDigits, digits.tokens, digits);

  ASSERT_TRUE(RunRequest(*engine, Turn(*engine, &kObject, 3, 3, id)).status.ok());
  const Outcome plain = RunRequest(*engine, Turn(*engine, nullptr, 2, 4, id));
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  const Outcome object = RunRequest(*engine, Turn(*engine, &kObject, 32, 5, id));
  ExpectWholeDocument(*engine, kObject, object.tokens, object);
}

TEST_P(EngineConstraintTest, BothBranchesOfAForkMidDocumentComplete) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  const Outcome cut = RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id));
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  const SessionId fork = ForkSession(*engine, id)->id;
  const int64_t at = GetSession(*engine, id)->num_tokens;
  const SessionId fork_at = ForkSessionAt(*engine, id, at)->id;

  const Outcome original = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, original.tokens), original);
  const Outcome branch = RunRequest(*engine, Turn(*engine, &kObject, 32, 3, fork));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, branch.tokens), branch);
  // A fork at the boundary takes the constraint state the boundary kept.
  const Outcome at_boundary = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, fork_at));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, at_boundary.tokens), at_boundary);
  EXPECT_EQ(at_boundary.tokens, original.tokens);  // the same state, the same seed
}

TEST_P(EngineConstraintTest, AnExportedSessionContinuesItsDocumentWhereItIsImported) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  const Outcome cut = RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id));
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  absl::StatusOr<std::string> exported = ExportSession(*engine, id);
  ASSERT_TRUE(exported.ok()) << exported.status();

  std::unique_ptr<Engine> other = Start();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<SessionInfo> imported = ImportSession(*other, *exported);
  ASSERT_TRUE(imported.ok()) << imported.status();
  const Outcome there = RunRequest(*other, Turn(*other, &kObject, 32, 2, imported->id));
  ExpectWholeDocument(*other, kObject, Concat(cut.tokens, there.tokens), there);
  // As it would have continued here.
  const Outcome here = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  EXPECT_EQ(there.tokens, here.tokens);
}

TEST_P(EngineConstraintTest, ImportRefusesAConstraintStateTheGrammarDoesNotLeadTo) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id)).status.ok());
  absl::StatusOr<std::string> exported = ExportSession(*engine, id);
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<SessionSnapshot> snapshot = DecodeSnapshot(
      *exported, model_.config, model_.fingerprint, engine->options().requests.max_prompt_tokens);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_TRUE(snapshot->constraint.has_value());

  SessionSnapshot bad_matcher = *snapshot;
  bad_matcher.constraint->matcher = std::string(64, '\xee');
  SessionSnapshot bad_grammar = *snapshot;
  bad_grammar.constraint->spec.text = "root ::= (\"unclosed\"";
  for (const SessionSnapshot* bad : {&bad_matcher, &bad_grammar}) {
    const absl::StatusOr<SessionInfo> imported =
        ImportSession(*engine, EncodeSnapshot(*bad, model_.fingerprint));
    EXPECT_EQ(imported.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(imported.status().message()), HasSubstr("snapshot constraint"));
  }
  // The intact one imports.
  EXPECT_TRUE(ImportSession(*engine, *exported).ok());
}

TEST_P(EngineConstraintTest, RewindReturnsTheDocumentToTheBoundary) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  const Outcome cut = RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id));
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  const int64_t boundary = GetSession(*engine, id)->num_tokens;
  const Outcome first = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, first.tokens), first);
  // The document is whole now; rewound, it is the cut one again.
  ASSERT_TRUE(RewindSession(*engine, id, boundary).ok());
  const Outcome again = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, again.tokens), again);
  EXPECT_EQ(again.tokens, first.tokens);
}

TEST_P(EngineConstraintTest, ARestartKeepsTheDocument) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  std::unique_ptr<Engine> engine = Start(options);
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  const Outcome cut = RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id));
  ASSERT_TRUE(cut.status.ok()) << cut.status;
  ASSERT_TRUE(engine->Shutdown(absl::Seconds(5)).ok());
  engine.reset();

  engine = Start(options);
  ASSERT_NE(engine, nullptr);
  const Outcome rest = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  ExpectWholeDocument(*engine, kObject, Concat(cut.tokens, rest.tokens), rest);
}

TEST_P(EngineConstraintTest, ARestartDoesNotLoadAConstraintStateTheGrammarDoesNotLeadTo) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  std::unique_ptr<Engine> engine = Start(options);
  ASSERT_NE(engine, nullptr);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(*engine, &kObject, 3, 1, id)).status.ok());
  ASSERT_TRUE(engine->Shutdown(absl::Seconds(5)).ok());
  engine.reset();

  // The record edited as anyone can: a matcher the grammar does not lead to, sealed again.
  FileSystem& fs = DefaultFileSystem();
  const std::string path = options.state_dir + "/" + id.value + ".session";
  absl::StatusOr<std::string> bytes = fs.ReadFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SessionRecord> record =
      DecodeSessionRecord(*bytes, id, model_.config, model_.fingerprint,
                          options.requests.max_prompt_tokens, absl::Now());
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_TRUE(record->snapshot.constraint.has_value());
  record->snapshot.constraint->matcher = std::string(64, '\xee');
  ASSERT_TRUE(fs.WriteFileDurably(path, EncodeSessionRecord(*record, model_.fingerprint)).ok());

  engine = Start(options);
  ASSERT_NE(engine, nullptr);
  const Outcome out = RunRequest(*engine, Turn(*engine, &kObject, 32, 2, id));
  EXPECT_THAT(out.status.code(),
              AnyOf(absl::StatusCode::kNotFound, absl::StatusCode::kDataLoss));
  EXPECT_TRUE(fs.ReadFile(path).ok());  // left in place
}

TEST_P(EngineConstraintTest, AGrammarTooAmbiguousForTheLimitFailsTheRequestMidDocument) {
  EngineOptions options;
  options.constraint_limits.max_matcher_stacks = 1;
  std::unique_ptr<Engine> engine = Start(options);
  ASSERT_NE(engine, nullptr);
  // One parse stack until "ab"; each "x" after it may end a group or begin one.
  const ConstraintSpec ambiguous = {.kind = ConstraintKind::kGrammar,
                                    .text = "root ::= \"ab\" (\"x\" | \"x\" \"x\")+ \".\"\n"};
  const SessionId id = CreateSession(*engine)->id;
  const Outcome out = RunRequest(*engine, Turn(*engine, &ambiguous, 32, 1, id));
  EXPECT_EQ(out.status.code(), absl::StatusCode::kResourceExhausted) << out.status;
  // What was sent is a valid beginning, and the session holds exactly that.
  ASSERT_GE(out.tokens.size(), 2u);
  EXPECT_EQ(out.tokens[0], 'a');
  EXPECT_EQ(out.tokens[1], 'b');
  absl::StatusOr<SessionInfo> info = GetSession(*engine, id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens,
            out.result.usage.prompt_tokens + static_cast<int64_t>(out.tokens.size()));
  EXPECT_TRUE(ExportSession(*engine, id).ok());  // the state agrees with the history
  const Outcome next = RunRequest(*engine, Turn(*engine, nullptr, 4, 2, id));
  EXPECT_TRUE(next.status.ok()) << next.status;
}

TEST_P(EngineConstraintTest, IgnoreEosAndAnotherVocabularysConstraintAreRefused) {
  std::unique_ptr<Engine> engine = Start();
  ASSERT_NE(engine, nullptr);
  GenerateRequest ignoring = Turn(*engine, &kObject, 8, 1);
  ignoring.ignore_eos = true;
  const Outcome refused = RunRequest(*engine, std::move(ignoring));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status.message()),
              HasSubstr("ignore_eos: cannot be combined with a constraint"));

  const Model other = MakeRandomModel(TinyConfig(), 4);
  ConstraintCache other_cache(TokenVocabulary::Create(*other.tokenizer, other.config.eos_token_id),
                              ConstraintLimits{});
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> foreign =
      other_cache.Get(kObject, "constraint.grammar");
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  GenerateRequest request = Turn(*engine, nullptr, 8, 1);
  request.constraint = *foreign;
  const Outcome other_vocabulary = RunRequest(*engine, std::move(request));
  EXPECT_EQ(other_vocabulary.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other_vocabulary.status.message()),
              HasSubstr("constraint: compiled for another vocabulary"));
}

TEST(EngineConstraintOptionsTest, ConstraintLimitsAreValidated) {
  EngineOptions options;
  options.constraint_limits.max_matcher_stacks = 0;
  const absl::Status status = ValidateEngineOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_matcher_stacks"));
}

}  // namespace
}  // namespace linserve
