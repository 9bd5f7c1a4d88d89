// linserve-cli end to end, against a spawned linserve serving a tiny random model.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/clients/tool_server.h"

namespace linserve::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Describe(const ProcessResult& r) {
  return absl::StrCat("exit ", r.exit_code, "\n--- stdout ---\n", r.out, "\n--- stderr ---\n",
                      r.err);
}

// One generation as printed with --format=jsonl.
struct Generation {
  std::vector<int> ids;
  std::string text;
  nlohmann::json last;
};

// Splits jsonl output into generations (each ends with the message carrying finish_reason).
std::vector<Generation> ParseJsonl(const std::string& out) {
  std::vector<Generation> generations(1);
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    const nlohmann::json message = nlohmann::json::parse(line);
    Generation& g = generations.back();
    for (const auto& token : message["tokens"]) g.ids.push_back(token["id"].get<int>());
    g.text += message["text"].get<std::string>();
    if (message["finish_reason"] != "FINISH_REASON_UNSPECIFIED") {
      g.last = message;
      generations.emplace_back();
    }
  }
  generations.pop_back();
  return generations;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  ProcessResult Cli(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), "--target=" + server_->target());
    return RunCli(args, input);
  }
  // Runs a command that must succeed; its stdout.
  std::string Ok(const std::vector<std::string>& args, const std::string& input = "") {
    const ProcessResult r = Cli(args, input);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return r.out;
  }
  std::string NewSession() {
    return std::string(absl::StripAsciiWhitespace(Ok({"sessions", "create"})));
  }
  int64_t SessionTokens(const std::string& id) {
    const nlohmann::json session = nlohmann::json::parse(Ok({"sessions", "get", id, "--format=json"}));
    int64_t tokens = -1;
    EXPECT_TRUE(absl::SimpleAtoi(session["num_tokens"].get<std::string>(), &tokens));
    return tokens;
  }
  std::string File(const std::string& name) { return server_->dir().Join(name); }

  static ToolServer* server_;
};

ToolServer* CliTest::server_ = nullptr;

TEST_F(CliTest, GenerateStreamsTheSameTextFromEveryKindOfPrompt) {
  const ProcessResult r =
      Cli({"generate", "--seed=5", "--max-new-tokens=12", "--usage", "hel", "lo"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(r.out.empty());
  EXPECT_THAT(r.err,
              HasSubstr("finish LENGTH; prompt 6 tokens (0 cached), generated 12 tokens, session "
                        "18 tokens;"));
  EXPECT_THAT(r.err, HasSubstr("; seed 5; request "));
  // The same seed gives the same text, however the prompt arrives: words, stdin, "-", ids.
  EXPECT_EQ(Ok({"generate", "--seed=5", "--max-new-tokens=12", "hel lo"}), r.out);
  EXPECT_EQ(Ok({"generate", "--seed=5", "--max-new-tokens=12"}, "hel lo"), r.out);
  EXPECT_EQ(Ok({"generate", "--seed=5", "--max-new-tokens=12", "-"}, "hel lo"), r.out);
  const std::string ids = Ok({"tokenize", "hel lo"});
  EXPECT_EQ(ids, "104 101 108 32 108 111\n");
  EXPECT_EQ(Ok({"generate", "--seed=5", "--max-new-tokens=12", "--token-ids=104,101,108,32",
                "--token-ids=108,111"}),
            r.out);
}

// A model without a tokenizer has no text: a generation from --token-ids prints its token ids in
// text format, space-separated — the ids --format=jsonl carries.
TEST(CliWithoutATokenizerTest, GenerateInTextFormatPrintsTheTokenIds) {
  ModelConfig config = TinyConfig();
  config.tokenizer = TokenizerKind::kNone;
  absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start({}, config);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<std::string> args = {"--target=" + (*server)->target(),
                                         "generate",
                                         "--seed=3",
                                         "--max-new-tokens=7",
                                         "--ignore-eos",
                                         "--token-ids=5,9,12"};
  const ProcessResult text = RunCli(args);
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  std::vector<std::string> jsonl_args = args;
  jsonl_args.push_back("--format=jsonl");
  const ProcessResult jsonl = RunCli(jsonl_args);
  ASSERT_EQ(jsonl.exit_code, 0) << Describe(jsonl);
  const std::vector<Generation> generations = ParseJsonl(jsonl.out);
  ASSERT_EQ(generations.size(), 1u) << jsonl.out;
  EXPECT_EQ(generations[0].text, "");
  ASSERT_EQ(generations[0].ids.size(), 7u) << jsonl.out;
  EXPECT_EQ(text.out, absl::StrJoin(generations[0].ids, " "));
}

TEST_F(CliTest, JsonlCarriesEveryTokenWithLogprobs) {
  const std::vector<std::string> args = {"generate", "--temperature=0", "--max-new-tokens=10",
                                         "--top-logprobs=2", "To be"};
  std::vector<std::string> jsonl = args;
  jsonl.push_back("--format=jsonl");
  const std::vector<Generation> g = ParseJsonl(Ok(jsonl));
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].ids.size(), 10u);
  EXPECT_EQ(g[0].last["finish_reason"], "FINISH_REASON_LENGTH");
  EXPECT_EQ(g[0].last["usage"]["generated_tokens"], 10);
  EXPECT_EQ(g[0].last["usage"]["prompt_tokens"], 5);

  // Text format prints the same text, and one logprob line per token on stderr.
  const ProcessResult text = Cli(args);
  ASSERT_EQ(text.exit_code, 0) << Describe(text);
  EXPECT_EQ(text.out, g[0].text);
  std::vector<std::string> lines = absl::StrSplit(text.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 10u) << text.err;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], StartsWith(absl::StrCat("token ", g[0].ids[i], " logprob ")));
    EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[i], ' ')).size(), 7u) << lines[i];
  }
}

TEST_F(CliTest, StopTokenIdsAndStopStringsEndTheGeneration) {
  // Seeded sampling: the same tokens every time, up to wherever a stop ends them.
  const std::vector<std::string> base = {"generate", "--seed=11", "--max-new-tokens=24", "abcdef"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return extra;
  };
  const std::vector<Generation> full = ParseJsonl(Ok(with({"--format=jsonl"})));
  ASSERT_EQ(full.size(), 1u);
  const std::vector<int>& ids = full[0].ids;
  ASSERT_EQ(ids.size(), 24u);

  // Stopping on the id of the 6th token stops at its first occurrence.
  const int stop_id = ids[5];
  const size_t first = std::find(ids.begin(), ids.end(), stop_id) - ids.begin();
  const std::vector<Generation> stopped = ParseJsonl(
      Ok(with({"--format=jsonl", absl::StrCat("--stop-token-id=", stop_id)})));
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].last["finish_reason"], "FINISH_REASON_STOP");
  EXPECT_EQ(stopped[0].ids.size(), first + 1);
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + first + 1), stopped[0].ids);

  // A stop string: a printable ASCII character first found past the start of the text; what
  // comes before it is printed, it and the rest are not.
  const std::string& text = full[0].text;
  size_t at = std::string::npos;
  for (size_t i = 1; i < text.size() && at == std::string::npos; ++i) {
    if (text[i] > ' ' && text[i] < 127 && text[i] != '\\' && text.find(text[i]) == i) at = i;
  }
  ASSERT_NE(at, std::string::npos) << "no usable stop character in: " << text;
  const ProcessResult r = Cli(with({"--usage", "--stop=" + text.substr(at, 1)}));
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, text.substr(0, at));
  EXPECT_THAT(r.err, HasSubstr("finish STOP;"));
}

TEST_F(CliTest, EverySamplingFlagReachesTheServer) {
  // An out-of-range value of each flag comes back as INVALID_ARGUMENT naming the request field.
  const std::pair<std::string, std::string> cases[] = {
      {"--temperature=-1", "sampling.temperature"},
      {"--top-k=-1", "sampling.top_k"},
      {"--top-p=0", "sampling.top_p"},
      {"--min-p=2", "sampling.min_p"},
      {"--repetition-penalty=0", "sampling.repetition_penalty"},
      {"--presence-penalty=3", "sampling.presence_penalty"},
      {"--frequency-penalty=-3", "sampling.frequency_penalty"},
      {"--max-new-tokens=-1", "max_new_tokens"},
      {"--top-logprobs=1000", "top_logprobs"},
      {"--stop-token-id=100000", "stop_token_ids"},
      {"--logit-bias=5=101", "sampling.logit_bias"},
      {"--n=0", "n"},
      {"--session-choice=0", "session_choice"},
      {"--prompt-logprobs=1000", "prompt_logprobs"},
  };
  for (const auto& [flag, field] : cases) {
    const ProcessResult r = Cli({"generate", flag, "hi"});
    EXPECT_EQ(r.exit_code, 3) << flag << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: " + field)) << flag;
  }
}

TEST_F(CliTest, ChoicesPromptLogprobsAndLogitBias) {
  // --n: each message names its choice; every choice gets its tokens.
  std::map<int, int> tokens_per_choice;
  for (absl::string_view line : absl::StrSplit(
           Ok({"generate", "--n=3", "--seed=3", "--max-new-tokens=4", "--format=jsonl", "hi"}),
           '\n', absl::SkipEmpty())) {
    const nlohmann::json message = nlohmann::json::parse(line);
    tokens_per_choice[message["choice"].get<int>()] += static_cast<int>(message["tokens"].size());
  }
  EXPECT_THAT(tokens_per_choice, ElementsAre(std::pair(0, 4), std::pair(1, 4), std::pair(2, 4)));
  const ProcessResult text = Cli({"generate", "--n=2", "hi"});
  EXPECT_EQ(text.exit_code, 64) << Describe(text);
  EXPECT_THAT(text.err, HasSubstr("--n above 1 needs --format=jsonl"));

  // --prompt-logprobs with nothing generated: a line per prompt token on stderr, each with its
  // logprob and its one alternative but the first (the model has no BOS: nothing precedes it).
  const ProcessResult scored =
      Cli({"generate", "--prompt-logprobs=1", "--max-new-tokens=0", "hello"});
  ASSERT_EQ(scored.exit_code, 0) << Describe(scored);
  EXPECT_EQ(scored.out, "");
  const std::vector<std::string> lines = absl::StrSplit(scored.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 5u) << scored.err;
  const char* const ids[] = {"104", "101", "108", "108", "111"};
  EXPECT_EQ(lines[0], "prompt token 104 logprob -");
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], StartsWith(absl::StrCat("prompt token ", ids[i], " logprob -")));
    EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[i], ' ')).size(), 7u) << lines[i];
  }

  // --logit-bias: +100 on "x" makes greedy decoding pick it every time.
  EXPECT_EQ(Ok({"generate", "--temperature=0", "--max-new-tokens=3", "--logit-bias=120=100", "hi"}),
            "xxx");
  const ProcessResult twice = Cli({"generate", "--logit-bias=120=1", "--logit-bias=120=2", "hi"});
  EXPECT_EQ(twice.exit_code, 64) << Describe(twice);
  EXPECT_THAT(twice.err, HasSubstr("--logit-bias=120=2: token 120 given twice"));
  const ProcessResult malformed = Cli({"generate", "--logit-bias=x", "hi"});
  EXPECT_EQ(malformed.exit_code, 64) << Describe(malformed);
  EXPECT_THAT(malformed.err, HasSubstr("--logit-bias=x: expected ID=BIAS"));
}

TEST_F(CliTest, ConstraintFlagsShapeTheText) {
  const ProcessResult regex = Cli({"generate", "--seed=3", "--regex=(yes|no)!", "--usage", "hi"});
  EXPECT_EQ(regex.exit_code, 0) << Describe(regex);
  EXPECT_TRUE(regex.out == "yes!" || regex.out == "no!") << Describe(regex);
  EXPECT_THAT(regex.err, HasSubstr("finish CONSTRAINT_COMPLETE;"));
  {
    std::ofstream(File("digits.gbnf")) << "root ::= [0-9]{3} \"-\" [0-9]{2}\n";
  }
  const std::string digits = Ok({"generate", "--seed=4", "--grammar=" + File("digits.gbnf"), "hi"});
  ASSERT_EQ(digits.size(), 6u) << digits;
  EXPECT_EQ(digits[3], '-') << digits;
  {
    std::ofstream(File("flag.json")) << R"({"type": "boolean"})";
  }
  const std::string flag =
      Ok({"generate", "--seed=5", "--json-schema=" + File("flag.json"), "hi"});
  EXPECT_TRUE(flag == "true" || flag == "false") << flag;
  const ProcessResult two = Cli({"generate", "--json-object", "--regex=a", "hi"});
  EXPECT_EQ(two.exit_code, 64) << Describe(two);
  EXPECT_THAT(two.err, HasSubstr("at most one of --json-schema"));
  const ProcessResult bad = Cli({"generate", "--regex=(a", "hi"});
  EXPECT_EQ(bad.exit_code, 3) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("error: INVALID_ARGUMENT: constraint.regex: "));
}

TEST_F(CliTest, SessionsSubcommands) {
  const std::string id = NewSession();
  ASSERT_EQ(id.size(), 32u) << id;
  EXPECT_EQ(SessionTokens(id), 0);
  EXPECT_THAT(Ok({"sessions", "get", id}), HasSubstr(absl::StrCat("id: ", id, "\ntokens: 0\n")));

  Ok({"generate", "--session=" + id, "--seed=1", "--max-new-tokens=8", "Hello"});
  EXPECT_EQ(SessionTokens(id), 13);

  // Fork: the copy has the same tokens and continues identically under the same seed.
  const std::string fork = std::string(absl::StripAsciiWhitespace(Ok({"sessions", "fork", id})));
  ASSERT_EQ(fork.size(), 32u);
  EXPECT_NE(fork, id);
  EXPECT_EQ(SessionTokens(fork), 13);

  // Export + import: a new session with the same state.
  const std::string snapshot = File("session.snap");
  const ProcessResult exported = Cli({"sessions", "export", id, snapshot});
  ASSERT_EQ(exported.exit_code, 0) << Describe(exported);
  EXPECT_THAT(exported.err, HasSubstr(absl::StrCat("exported ", id, ": ")));
  EXPECT_FALSE(ReadFile(snapshot).empty());
  const std::string imported =
      std::string(absl::StripAsciiWhitespace(Ok({"sessions", "import", snapshot})));
  ASSERT_EQ(imported.size(), 32u);
  EXPECT_EQ(SessionTokens(imported), 13);
  // Export to stdout and import from stdin round-trip the same bytes.
  const std::string piped = Ok({"sessions", "export", id, "-"});
  EXPECT_EQ(piped, ReadFile(snapshot));
  const nlohmann::json from_stdin =
      nlohmann::json::parse(Ok({"sessions", "import", "-", "--format=json"}, piped));
  EXPECT_EQ(from_stdin["num_tokens"], "13");

  const std::vector<std::string> next = {"generate", "--seed=9", "--max-new-tokens=10", " again"};
  auto continue_on = [&](const std::string& session) {
    std::vector<std::string> args = next;
    args.push_back("--session=" + session);
    return Ok(args);
  };
  const std::string original = continue_on(id);
  EXPECT_EQ(continue_on(fork), original);
  EXPECT_EQ(continue_on(imported), original);

  // list shows them all, in text and JSON.
  const std::string table = Ok({"sessions", "list", "--page-size=1"});
  EXPECT_THAT(table, StartsWith("ID "));
  for (const std::string& s : {id, fork, imported}) EXPECT_THAT(table, HasSubstr(s));
  int listed = 0;
  for (absl::string_view line :
       absl::StrSplit(Ok({"sessions", "list", "--format=json"}), '\n', absl::SkipEmpty())) {
    const nlohmann::json session = nlohmann::json::parse(line);
    if (session["id"] == id || session["id"] == fork || session["id"] == imported) ++listed;
  }
  EXPECT_EQ(listed, 3);

  // delete takes several ids; a deleted session is NOT_FOUND.
  Ok({"sessions", "delete", fork, imported});
  const ProcessResult gone = Cli({"sessions", "get", fork});
  EXPECT_EQ(gone.exit_code, 5) << Describe(gone);
  EXPECT_THAT(gone.err, HasSubstr("error: NOT_FOUND: "));
  Ok({"sessions", "delete", id});
}

TEST_F(CliTest, ChatOverStdinWithForkExportAndImport) {
  const std::string id = NewSession();
  const std::string snapshot = File("chat.snap");
  // Every turn samples with seed 3, so the same state gives the same reply.
  const std::string script = absl::StrCat(
      "Hello\n",                 // reply 0, on the given session
      "/export ", snapshot, "\n",  // the session after "Hello"
      "/fork\n",                 // now on a copy
      "abc\n",                   // reply 1, on the fork
      "/switch ", id, "\n",      // back on the original
      "abc\n",                   // reply 2 == reply 1
      "/import ", snapshot, "\n",  // a third session, as after "Hello"
      "abc\n",                   // reply 3 == reply 1
      "/info\n",
      "/reset\n",
      "abc\n");                  // reply 4, on a new empty session
  const ProcessResult r = Cli({"chat", "--session=" + id, "--seed=3", "--max-new-tokens=6",
                               "--format=jsonl"},
                              script);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::vector<Generation> replies = ParseJsonl(r.out);
  ASSERT_EQ(replies.size(), 5u) << Describe(r);
  EXPECT_EQ(replies[2].ids, replies[1].ids);
  EXPECT_EQ(replies[3].ids, replies[1].ids);
  // Each line is sent with a newline: "abc\n" is 4 tokens on top of the 6 + 6 of the first turn.
  EXPECT_EQ(replies[1].last["usage"]["session_tokens"], "22");
  EXPECT_EQ(replies[4].last["usage"]["session_tokens"], "10");
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("chat: on session ", id, " (0 tokens)")));
  EXPECT_THAT(r.err, HasSubstr("chat: exported " + id + " to " + snapshot));
  EXPECT_THAT(r.err, HasSubstr("chat: forked " + id + " -> "));
  EXPECT_THAT(r.err, HasSubstr("chat: now on " + id + " (12 tokens)"));
  EXPECT_THAT(r.err, HasSubstr("chat: imported " + snapshot + " as "));
  EXPECT_THAT(r.err, HasSubstr("tokens: 22\nresidency: "));

  // The session named with --session is kept, the three the chat created are deleted.
  EXPECT_EQ(SessionTokens(id), 22);
  const std::string listed = Ok({"sessions", "list"});
  for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
    if (absl::ConsumePrefix(&line, "chat: new session ")) {
      EXPECT_THAT(listed, Not(HasSubstr(line.substr(0, 32))));
    }
  }
  Ok({"sessions", "delete", id});
}

TEST_F(CliTest, ChatRewindUndoesATurnExactlyAndSessionsRewindAndForkUseBoundaries) {
  const std::string id = NewSession();
  const ProcessResult r =
      Cli({"chat", "--session=" + id, "--seed=3", "--max-new-tokens=6", "--format=jsonl"},
          "Hello\nabc\n/rewind\nabc\n");
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::vector<Generation> replies = ParseJsonl(r.out);
  ASSERT_EQ(replies.size(), 3u) << Describe(r);
  // The second "abc" runs on the session as it stood before the first: the same reply.
  EXPECT_EQ(replies[2].ids, replies[1].ids);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("chat: rewound ", id, " from 22 to 12 tokens")));
  EXPECT_THAT(Ok({"sessions", "get", id}), HasSubstr("boundaries: 0 12 22\n"));

  const std::string fork =
      std::string(absl::StripAsciiWhitespace(Ok({"sessions", "fork", id, "12"})));
  ASSERT_EQ(fork.size(), 32u);
  EXPECT_EQ(SessionTokens(fork), 12);
  EXPECT_EQ(SessionTokens(id), 22);
  EXPECT_THAT(Ok({"sessions", "rewind", id, "0"}), HasSubstr("tokens: 0\n"));
  const ProcessResult bad = Cli({"sessions", "rewind", id, "5"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("num_tokens: 5 is not a kept turn boundary"));
  EXPECT_THAT(bad.err, HasSubstr("kept: 0"));
  const ProcessResult usage = Cli({"sessions", "rewind", id, "-3"});
  EXPECT_EQ(usage.exit_code, 64) << Describe(usage);
  Ok({"sessions", "delete", id, fork});
}

TEST_F(CliTest, ChatTextRepliesEndInNewlinesAndFailuresSetTheExitStatus) {
  const ProcessResult r =
      Cli({"chat", "--seed=1", "--max-new-tokens=4", "--keep"}, "/fork\nhi\n/bogus\n");
  EXPECT_EQ(r.exit_code, 64) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: unknown command /bogus (try /help)"));
  EXPECT_EQ(r.out.back(), '\n');
  // --keep: both the created session and its fork survive the chat.
  const size_t kept = r.err.find("chat: kept sessions ");
  ASSERT_NE(kept, std::string::npos) << r.err;
  const std::vector<std::string> ids = absl::StrSplit(
      absl::StripAsciiWhitespace(r.err.substr(kept + 20)), ' ');
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(SessionTokens(ids[0]), 0);
  EXPECT_EQ(SessionTokens(ids[1]), 7);
  Ok({"sessions", "delete", ids[0], ids[1]});

  const ProcessResult bad = Cli({"chat", "--session=" + std::string(32, 'a')}, "hi\n");
  EXPECT_EQ(bad.exit_code, 5) << Describe(bad);
  EXPECT_THAT(bad.err, HasSubstr("error: NOT_FOUND: "));
}

TEST_F(CliTest, ModelHealthTokenizeDetokenize) {
  const std::string model = Ok({"model"});
  EXPECT_THAT(model, HasSubstr("architecture: linear_transformer\n"));
  EXPECT_THAT(model, HasSubstr("parameters: 25472\n"));
  EXPECT_THAT(model, HasSubstr("device: cpu\n"));
  EXPECT_THAT(model, HasSubstr("\nlayer 1: mixer linear_attention(n_heads=4, head_dim=8, "
                               "feature_dim=8, feature_map=elu_plus_one, eps=1e-06, bias=true); "
                               "norm layer_norm(eps=1e-05); mlp ffn(d_ff=64, activation=gelu, "
                               "bias=true); state 1152 bytes\n"
                               "final norm: layer_norm(eps=1e-05)\n"));
  const nlohmann::json json = nlohmann::json::parse(Ok({"model", "--format=json"}));
  EXPECT_EQ(json["model"]["vocab_size"], 260);
  EXPECT_EQ(json["model"]["eos_token_id"], 257);
  EXPECT_EQ(json["model"]["layers"][0]["state_bytes"], "1152");  // int64 is a string in JSON
  EXPECT_EQ(Ok({"health"}), "SERVING\n");
  EXPECT_EQ(Ok({"health", "--service=linserve.v1.LinServe"}), "SERVING\n");
  EXPECT_EQ(Ok({"tokenize", "--format=json", "hé"}), "{\"token_ids\":[104,195,169]}\n");
  EXPECT_EQ(Ok({"detokenize", "104,195", "169"}), "hé");
}

TEST_F(CliTest, ErrorsExitWithTheStatusCodeAndNameIt) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  } cases[] = {
      {{"generate", "--session=" + std::string(32, 'b'), "x"}, 5, "error: NOT_FOUND: "},
      {{"sessions", "get", "zz"}, 3, "error: INVALID_ARGUMENT: session_id: "},
      {{"sessions", "import", File("missing.snap")}, 5,
       "error: NOT_FOUND: " + File("missing.snap") + ": cannot open it"},
      {{"detokenize", "999999"}, 3, "error: INVALID_ARGUMENT: "},
      {{"generate", "--bogus", "x"}, 64, "error: unknown flag --bogus"},
      {{"bogus"}, 64, "error: unknown command \"bogus\""},
      {{"sessions", "get"}, 64, "error: usage: sessions get ID"},
      {{"sessions", "frobnicate"}, 64, "error: sessions: unknown action \"frobnicate\""},
      {{"model", "--format=xml"}, 64, "error: --format=xml: expected text or json"},
      {{"generate", "--token-ids=1", "x"}, 64, "give the prompt as PROMPT or --token-ids"},
      {{"model", "--ca-cert=" + File("none.pem")}, 5,
       "error: NOT_FOUND: --ca-cert=" + File("none.pem") + ": cannot open the file"},
      {{"model", "--client-cert=" + TestData("client.crt")}, 64,
       "--client-cert and --client-key: give both"},
      {{"model", "--timeout=0s"}, 64, "--timeout=0: must be > 0"},
  };
  for (const Case& c : cases) {
    const ProcessResult r = Cli(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args[0] << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args[0];
  }
  const ProcessResult unreachable = RunCli({"--target=127.0.0.1:1", "model"});
  EXPECT_EQ(unreachable.exit_code, 14) << Describe(unreachable);
  EXPECT_THAT(unreachable.err, HasSubstr("error: UNAVAILABLE: "));
  const ProcessResult deadline = Cli({"generate", "--timeout=1ms", "--max-new-tokens=4000",
                                      "--ignore-eos", "x"});
  EXPECT_EQ(deadline.exit_code, 4) << Describe(deadline);
  EXPECT_THAT(deadline.err, HasSubstr("error: DEADLINE_EXCEEDED: "));
}

TEST_F(CliTest, HelpDocumentsEveryCommandAndFlag) {
  const ProcessResult general = RunCli({"--help"});
  EXPECT_EQ(general.exit_code, 0);
  for (const char* command :
       {"generate", "chat", "sessions", "model", "health", "tokenize", "detokenize", "help"}) {
    EXPECT_THAT(general.out, HasSubstr(absl::StrCat("\n  ", command, " "))) << command;
  }
  for (const char* flag : {"--target=", "--tls\n", "--ca-cert=", "--client-cert=", "--client-key=",
                           "--tls-server-name=", "--token=", "--token-file=", "--timeout="}) {
    EXPECT_THAT(general.out, HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(general.out, HasSubstr("Exit status: 0 on success; 64 for a usage error"));
  const ProcessResult generate = RunCli({"help", "generate"});
  EXPECT_EQ(generate.exit_code, 0);
  for (const char* flag : {"--session=", "--token-ids=", "--max-new-tokens=", "--temperature=",
                           "--top-k=", "--top-p=", "--min-p=", "--repetition-penalty=",
                           "--presence-penalty=", "--frequency-penalty=", "--seed=", "--stop=",
                           "--stop-token-id=", "--ignore-eos", "--top-logprobs=", "--usage",
                           "--format="}) {
    EXPECT_THAT(generate.out, HasSubstr(flag)) << flag;
  }
  EXPECT_EQ(RunCli({"chat", "--help"}).out, RunCli({"help", "chat"}).out);
  EXPECT_THAT(RunCli({"help", "chat"}).out, HasSubstr("/export FILE"));
  EXPECT_THAT(RunCli({"help", "sessions"}).out, HasSubstr("sessions import FILE"));
  const ProcessResult none = RunCli({});
  EXPECT_EQ(none.exit_code, 64);
  EXPECT_THAT(none.err, HasSubstr("Commands:"));
}

// TLS with a client certificate (mutual TLS) and a bearer token, against a server that
// requires all three.
class CliSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<ScopedTempDir>();
    std::ofstream(dir_->Join("token")) << "s3cret\n";
    absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start(
        {"--tls_cert=" + TestData("server.crt"), "--tls_key=" + TestData("server.key"),
         "--tls_client_ca=" + TestData("ca.crt"), "--auth_token_file=" + dir_->Join("token")});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  ProcessResult Cli(const std::vector<std::string>& flags, const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--target=" + server_->target()};
    all.insert(all.end(), flags.begin(), flags.end());
    all.insert(all.end(), args.begin(), args.end());
    return RunCli(all);
  }

  std::unique_ptr<ScopedTempDir> dir_;
  std::unique_ptr<ToolServer> server_;
};

TEST_F(CliSecurityTest, TlsClientCertificateAndTokenFlags) {
  const std::vector<std::string> tls = {"--ca-cert=" + TestData("ca.crt"),
                                        "--client-cert=" + TestData("client.crt"),
                                        "--client-key=" + TestData("client.key")};
  std::vector<std::string> all = tls;
  all.push_back("--token-file=" + dir_->Join("token"));

  // Health needs no token; every linserve.v1 call does.
  ProcessResult r = Cli(tls, {"health"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "SERVING\n");
  r = Cli(all, {"model"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli(tls, {"--token=s3cret", "tokenize", "ab"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "97 98\n");
  // The certificate names localhost: --tls-server-name makes 127.0.0.1 acceptable, and is
  // checked (a wrong name fails the handshake).
  r = Cli(all, {"--tls-server-name=localhost", "model"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli(all, {"--tls-server-name=elsewhere.example", "model"});
  EXPECT_EQ(r.exit_code, 14) << Describe(r);

  // Under mutual TLS a caller sending no token is its certificate's tenant; a wrong token is
  // refused all the same.
  r = Cli(tls, {"model"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli(tls, {"--token=wrong", "model"});
  EXPECT_EQ(r.exit_code, 16) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: UNAUTHENTICATED: "));

  // Without the client certificate, with one the CA never signed, without TLS, or trusting
  // only the system roots: the connection fails.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--ca-cert=" + TestData("ca.crt")},
        std::vector<std::string>{"--ca-cert=" + TestData("ca.crt"),
                                 "--client-cert=" + TestData("stranger.crt"),
                                 "--client-key=" + TestData("stranger.key")},
        std::vector<std::string>{}, std::vector<std::string>{"--tls"}}) {
    r = Cli(flags, {"health"});
    EXPECT_EQ(r.exit_code, 14) << absl::StrJoin(flags, " ") << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr("error: UNAVAILABLE: "));
  }
}

}  // namespace
}  // namespace linserve::testing
