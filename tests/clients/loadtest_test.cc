// linserve-loadtest end to end, against a spawned linserve serving a tiny random model: its
// token counts must equal what the server's own Prometheus metrics counted over the same run.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/clients/tool_server.h"

namespace linserve::testing {
namespace {

using ::testing::HasSubstr;

std::string Describe(const ProcessResult& r) {
  return absl::StrCat("exit ", r.exit_code, "\n--- stdout ---\n", r.out, "\n--- stderr ---\n",
                      r.err);
}

// The server's counters of tokens, read from its /metrics.
struct ServerTokens {
  int64_t generated = -1;
  int64_t prompt = -1;
  int64_t saved = -1;
};

ServerTokens Scrape(int port) {
  httplib::Client http("127.0.0.1", port);
  httplib::Result response = http.Get("/metrics");
  ServerTokens tokens;
  if (!response || response->status != 200) {
    ADD_FAILURE() << "GET /metrics on port " << port << " failed";
    return tokens;
  }
  for (absl::string_view line : absl::StrSplit(response->body, '\n')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2) continue;
    double value = 0;
    if (!absl::SimpleAtod(parts[1], &value)) continue;
    if (parts[0] == "linserve_generated_tokens_total") tokens.generated = static_cast<int64_t>(value);
    if (parts[0] == "linserve_prompt_tokens_total") tokens.prompt = static_cast<int64_t>(value);
    if (parts[0] == "linserve_prefix_tokens_saved_total") {
      tokens.saved = static_cast<int64_t>(value);
    }
  }
  EXPECT_GE(tokens.generated, 0) << response->body;
  EXPECT_GE(tokens.prompt, 0) << response->body;
  return tokens;
}

void ExpectOrderedPercentiles(const nlohmann::json& latency, const std::string& what) {
  EXPECT_GT(latency["count"].get<int64_t>(), 0) << what;
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>()) << what;
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>()) << what;
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>()) << what;
}

class LoadtestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Runs the load test with --json and returns the parsed report.
  nlohmann::json Run(std::vector<std::string> args, ProcessResult* result = nullptr) {
    const std::string json = server_->dir().Join("report.json");
    args.insert(args.begin(), {"--target=" + server_->target(), "--json=" + json});
    const ProcessResult r = RunLoadtest(args);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    if (result != nullptr) *result = r;
    return nlohmann::json::parse(ReadFile(json), nullptr, /*allow_exceptions=*/false);
  }

  std::unique_ptr<ToolServer> server_;
};

TEST_F(LoadtestTest, ClosedLoopCountsEqualTheServersMetrics) {
  const ServerTokens before = Scrape(server_->metrics_port());
  ProcessResult r;
  const nlohmann::json report =
      Run({"--concurrency=4", "--duration=3s", "--warmup=500ms", "--prompt-tokens=uniform:4:24",
           "--output-tokens=uniform:8:32", "--progress-interval=500ms"},
          &r);
  ASSERT_TRUE(report.is_object()) << Describe(r);
  const ServerTokens after = Scrape(server_->metrics_port());

  EXPECT_EQ(report["errors"], nlohmann::json::object());
  EXPECT_EQ(report["total"]["errors"], 0);
  EXPECT_EQ(report["requests_failed"], 0);
  EXPECT_GT(report["requests_ok"].get<int64_t>(), 0);
  EXPECT_EQ(report["total"]["output_tokens"].get<int64_t>(), after.generated - before.generated);
  EXPECT_EQ(report["total"]["prompt_tokens"].get<int64_t>(), after.prompt - before.prompt);
  // The warm-up's requests are in the totals, not in the figures.
  EXPECT_LT(report["output_tokens"].get<int64_t>(), report["total"]["output_tokens"].get<int64_t>());
  EXPECT_GT(report["output_tokens_per_second"].get<double>(), 0);
  EXPECT_GT(report["measured_seconds"].get<double>(), 0);
  ExpectOrderedPercentiles(report["time_to_first_token_ms"], "ttft");
  ExpectOrderedPercentiles(report["inter_token_latency_ms"], "itl");
  ExpectOrderedPercentiles(report["end_to_end_ms"], "e2e");
  EXPECT_EQ(report["end_to_end_ms"]["count"], report["requests_ok"]);
  EXPECT_EQ(report["settings"]["concurrency"], "4");

  EXPECT_THAT(r.out, HasSubstr("linserve-loadtest report\n"));
  EXPECT_THAT(r.out, HasSubstr("time to first token"));
  EXPECT_THAT(r.err, HasSubstr("s] "));
  EXPECT_THAT(r.err, HasSubstr(" tok/s"));
}

TEST_F(LoadtestTest, EveryRequestCarriesTheConstraint) {
  // Every output is a whole match: two or three tokens of the byte model, then the end.
  const nlohmann::json report =
      Run({"--concurrency=4", "--requests=40", "--duration=20s", "--output-tokens=64",
           "--constraint=regex:(ab|cd)!", "--progress-interval=0"});
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["settings"]["constraint"], "regex:(ab|cd)!");
  EXPECT_EQ(report["requests_failed"], 0);
  EXPECT_GE(report["requests_ok"].get<int64_t>(), 40);
  // Each request ended with its document ("ab!" or "cd!"), not at --output-tokens.
  EXPECT_EQ(report["total"]["output_tokens"].get<int64_t>(),
            3 * report["total"]["requests"].get<int64_t>());
}

TEST_F(LoadtestTest, ResentConversationsAreServedFromCachedPrefixes) {
  const ServerTokens before = Scrape(server_->metrics_port());
  ProcessResult r;
  const nlohmann::json report =
      Run({"--concurrency=1", "--turns=3", "--resend", "--requests=6", "--prompt-tokens=40",
           "--output-tokens=8", "--progress-interval=0"},
          &r);
  ASSERT_TRUE(report.is_object()) << Describe(r);
  const ServerTokens after = Scrape(server_->metrics_port());
  EXPECT_EQ(report["total"]["errors"], 0);
  EXPECT_EQ(report["requests_ok"], 6);
  // Two conversations (the test model has no BOS): 40, then + 8 + 40, then + 8 + 40 tokens.
  EXPECT_EQ(report["total"]["prompt_tokens"].get<int64_t>(), 2 * (40 + 88 + 136));
  // Turns 2 and 3 start from the state the previous turn left (all but its last reply token).
  EXPECT_EQ(report["total"]["cached_prompt_tokens"].get<int64_t>(), 2 * (47 + 95));
  EXPECT_EQ(report["total"]["cached_prompt_tokens"].get<int64_t>(), after.saved - before.saved);
  EXPECT_EQ(report["settings"]["workload"],
            "conversations of 3 turns resending their history, think fixed:0 ms");
  EXPECT_THAT(r.out, HasSubstr("528 (284 cached)"));
}

TEST_F(LoadtestTest, OpenLoopSessionsWithForkAndExport) {
  const ServerTokens before = Scrape(server_->metrics_port());
  const nlohmann::json report =
      Run({"--mode=open", "--rate=30", "--duration=3s", "--turns=2",
           "--think-time-ms=uniform:0:20", "--fork", "--export", "--prompt-tokens=8",
           "--output-tokens=normal:12:4", "--progress-interval=0"});
  ASSERT_TRUE(report.is_object());
  const ServerTokens after = Scrape(server_->metrics_port());

  EXPECT_EQ(report["total"]["errors"], 0);
  EXPECT_EQ(report["dropped_arrivals"], 0);
  EXPECT_EQ(report["total"]["output_tokens"].get<int64_t>(), after.generated - before.generated);
  EXPECT_EQ(report["total"]["prompt_tokens"].get<int64_t>(), after.prompt - before.prompt);
  const nlohmann::json& ops = report["operations"];
  const int64_t created = ops["create"]["ok"].get<int64_t>();
  EXPECT_GT(created, 0);
  EXPECT_GT(ops["fork"]["ok"].get<int64_t>(), 0);
  EXPECT_GT(ops["export"]["ok"].get<int64_t>(), 0);
  EXPECT_GT(ops["export"]["mean_bytes"].get<double>(), 0);
  EXPECT_EQ(ops["delete"]["ok"].get<int64_t>(), created + ops["fork"]["ok"].get<int64_t>());
  EXPECT_EQ(report["settings"]["rate"], "30/s");

  // Every session the load test created was deleted.
  const ProcessResult list =
      RunCli({"--target=" + server_->target(), "sessions", "list", "--format=json"});
  EXPECT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_EQ(list.out, "");
}

TEST_F(LoadtestTest, FailedRequestsAreCountedByStatusCode) {
  // A 1 ms deadline cannot cover 2000 tokens: every request ends DEADLINE_EXCEEDED.
  const nlohmann::json report =
      Run({"--concurrency=2", "--requests=10", "--output-tokens=2000", "--request-timeout=1ms",
           "--progress-interval=0"});
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report["requests_failed"], 10);
  EXPECT_EQ(report["errors"]["DEADLINE_EXCEEDED"], 10);
  EXPECT_EQ(report["total"]["requests"], 10);
}

TEST(LoadtestSecurityTest, MutualTlsAndBearerToken) {
  ScopedTempDir dir;
  std::ofstream(dir.Join("token")) << "load-token\n";
  absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start(
      {"--tls_cert=" + TestData("server.crt"), "--tls_key=" + TestData("server.key"),
       "--tls_client_ca=" + TestData("ca.crt"), "--auth_token_file=" + dir.Join("token")});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<std::string> tls = {
      "--target=" + (*server)->target(), "--ca-cert=" + TestData("ca.crt"),
      "--client-cert=" + TestData("client.crt"), "--client-key=" + TestData("client.key"),
      "--requests=20", "--concurrency=2", "--output-tokens=8", "--progress-interval=0",
      "--json=" + dir.Join("report.json")};
  std::vector<std::string> with_token = tls;
  with_token.push_back("--token-file=" + dir.Join("token"));
  const ProcessResult ok = RunLoadtest(with_token);
  ASSERT_EQ(ok.exit_code, 0) << Describe(ok);
  const nlohmann::json report = nlohmann::json::parse(ReadFile(dir.Join("report.json")));
  EXPECT_EQ(report["requests_ok"], 20);
  EXPECT_EQ(report["total"]["errors"], 0);

  // Under mutual TLS a caller without a token is its certificate's tenant; a wrong token is
  // refused.
  { std::ofstream(dir.Join("wrong_token")) << "not-the-token\n"; }
  std::vector<std::string> with_wrong_token = tls;
  with_wrong_token.push_back("--token-file=" + dir.Join("wrong_token"));
  const ProcessResult wrong_token = RunLoadtest(with_wrong_token);
  EXPECT_EQ(wrong_token.exit_code, 16) << Describe(wrong_token);
  EXPECT_THAT(wrong_token.err, HasSubstr("UNAUTHENTICATED"));
}

TEST_F(LoadtestTest, UsageAndSetupErrors) {
  const std::string target = "--target=" + server_->target();
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  } cases[] = {
      {{target, "--mode=burst"}, 64, "--mode=burst: expected closed or open"},
      {{target, "--concurrency=0"}, 64, "--concurrency=0 is outside [1, 4096]"},
      {{target, "--output-tokens=uniform:1:9000"}, 64,
       "--output-tokens=uniform:1:9000: reaches 9000 tokens, over the server's max_new_tokens "
       "of 4096"},
      {{target, "--prompt-tokens=poisson:3"}, 64, "unknown distribution \"poisson\""},
      {{target, "--export"}, 64, "--fork and --export need a session workload"},
      {{target, "extra"}, 64, "unexpected argument \"extra\""},
      {{"--target=127.0.0.1:1"}, 14, "error: GetModelInfo from 127.0.0.1:1: UNAVAILABLE: "},
  };
  for (const Case& c : cases) {
    const ProcessResult r = RunLoadtest(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args.back() << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args.back();
  }
  const ProcessResult help = RunLoadtest({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"--mode=", "--concurrency=", "--rate=", "--max-inflight=", "--turns=", "--think-time-ms=",
        "--fork", "--export", "--prompt-tokens=", "--output-tokens=", "--temperature=",
        "--ignore-eos", "--duration=", "--requests=", "--warmup=", "--request-timeout=",
        "--drain-timeout=", "--seed=", "--json=", "--progress-interval=", "--target=",
        "--ca-cert=", "--token-file="}) {
    EXPECT_THAT(help.out, HasSubstr(flag)) << flag;
  }
}

}  // namespace
}  // namespace linserve::testing
