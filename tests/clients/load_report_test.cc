#include "client/loadtest/load_report.h"

#include <vector>

#include "client/loadtest/latency_summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::loadtest {
namespace {

using ::testing::HasSubstr;

TEST(SummarizeTest, NearestRankPercentiles) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  const LatencySummary s = Summarize(samples);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.max, 100);
}

TEST(SummarizeTest, SmallAndEmptySets) {
  const LatencySummary one = Summarize({7});
  EXPECT_EQ(one.count, 1);
  EXPECT_DOUBLE_EQ(one.p50, 7);
  EXPECT_DOUBLE_EQ(one.p99, 7);
  const LatencySummary three = Summarize({3, 1, 2});
  EXPECT_DOUBLE_EQ(three.p50, 2);
  EXPECT_DOUBLE_EQ(three.p90, 3);
  const LatencySummary none = Summarize({});
  EXPECT_EQ(none.count, 0);
  EXPECT_DOUBLE_EQ(none.max, 0);
}

GenerateRecord Ok(bool measured, double start, double first, double end, int64_t out,
                  int64_t prompt, std::vector<double> gaps) {
  GenerateRecord r;
  r.measured = measured;
  r.start_s = start;
  r.first_token_s = first;
  r.end_s = end;
  r.output_tokens = out;
  r.prompt_tokens = prompt;
  r.inter_token_s = std::move(gaps);
  return r;
}

TEST(BuildReportTest, ExcludesWarmUpFromFiguresButNotFromTotals) {
  std::vector<GenerateRecord> requests = {
      Ok(false, 0.0, 0.5, 1.0, 4, 10, {0.1, 0.1, 0.1}),  // warm-up
      Ok(true, 2.0, 2.1, 2.4, 3, 5, {0.1, 0.2}),
      Ok(true, 2.0, 2.3, 3.0, 2, 6, {0.4}),
  };
  GenerateRecord failed;
  failed.measured = true;
  failed.start_s = 2.5;
  failed.end_s = 2.6;
  failed.output_tokens = 1;
  failed.code = absl::StatusCode::kResourceExhausted;
  requests.push_back(failed);
  GenerateRecord warm_failed = failed;
  warm_failed.measured = false;
  warm_failed.code = absl::StatusCode::kUnavailable;
  requests.push_back(warm_failed);

  std::vector<OperationRecord> ops = {
      {"create", true, 0.001, 0, absl::StatusCode::kOk},
      {"export", true, 0.004, 1000, absl::StatusCode::kOk},
      {"export", true, 0.002, 3000, absl::StatusCode::kOk},
      {"fork", true, 0.003, 0, absl::StatusCode::kNotFound},
      {"fork", false, 0.003, 0, absl::StatusCode::kOk},
  };
  const LoadReport r = BuildReport({{"mode", "closed"}}, requests, ops, 2.0, 4.0, 3);
  EXPECT_EQ(r.requests_ok, 2);
  EXPECT_EQ(r.requests_failed, 1);
  EXPECT_DOUBLE_EQ(r.measured_seconds, 2.0);
  // Tokens at 2.1, 2.2, 2.4 and 2.3, 2.7 fall in [2, 4]; the warm-up's at 0.5-0.8 do not.
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_EQ(r.prompt_tokens, 11);
  EXPECT_DOUBLE_EQ(r.requests_per_second, 1.0);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_second, 2.5);
  EXPECT_EQ(r.time_to_first_token_ms.count, 2);
  EXPECT_NEAR(r.time_to_first_token_ms.p50, 100, 1e-9);
  EXPECT_NEAR(r.time_to_first_token_ms.max, 300, 1e-9);
  EXPECT_EQ(r.inter_token_latency_ms.count, 3);
  EXPECT_NEAR(r.inter_token_latency_ms.max, 400, 1e-9);
  EXPECT_NEAR(r.end_to_end_ms.p50, 400, 1e-9);
  EXPECT_NEAR(r.end_to_end_ms.max, 1000, 1e-9);
  EXPECT_EQ(r.errors.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(r.errors.at("NOT_FOUND"), 1);
  EXPECT_EQ(r.errors.count("UNAVAILABLE"), 0u);
  EXPECT_EQ(r.operations.at("export").ok, 2);
  EXPECT_DOUBLE_EQ(r.operations.at("export").mean_bytes, 2000);
  EXPECT_NEAR(r.operations.at("export").latency_ms.max, 4, 1e-9);
  EXPECT_EQ(r.operations.at("fork").failed, 1);
  EXPECT_EQ(r.operations.at("fork").ok, 0);
  EXPECT_EQ(r.dropped_arrivals, 3);
  EXPECT_EQ(r.total_requests, 5);
  EXPECT_EQ(r.total_output_tokens, 4 + 3 + 2 + 1 + 1);
  EXPECT_EQ(r.total_prompt_tokens, 21);
  EXPECT_EQ(r.total_errors, 3);

  // A window that ends at 2.5 counts the tokens and completions inside it only, whichever
  // request they belong to: 2.1, 2.2, 2.3, 2.4 and the completion at 2.4.
  const LoadReport narrow = BuildReport({}, requests, ops, 2.0, 2.5, 0);
  EXPECT_EQ(narrow.output_tokens, 4);
  EXPECT_DOUBLE_EQ(narrow.output_tokens_per_second, 8.0);
  EXPECT_DOUBLE_EQ(narrow.requests_per_second, 2.0);
  EXPECT_EQ(narrow.requests_ok, 2);
  // The warm-up's tokens count when the window covers them.
  EXPECT_EQ(BuildReport({}, requests, ops, 0.0, 4.0, 0).output_tokens, 9);
}

TEST(BuildReportTest, TextAndJsonCarryTheFigures) {
  std::vector<GenerateRecord> requests = {
      Ok(true, 0, 0.01, 0.02, 5, 7, {0.0025, 0.0025, 0.0025, 0.0025})};
  GenerateRecord failed;
  failed.measured = true;
  failed.code = absl::StatusCode::kDeadlineExceeded;
  requests.push_back(failed);
  const LoadReport r = BuildReport({{"mode", "open"}, {"rate", "5"}}, requests, {}, 0, 0.5, 0);
  const std::string text = FormatReport(r);
  EXPECT_THAT(text, HasSubstr("mode"));
  EXPECT_THAT(text, HasSubstr("1 ok, 1 failed"));
  EXPECT_THAT(text, HasSubstr("output tokens/s        10.0\n"));
  EXPECT_THAT(text, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(text, HasSubstr("time to first token"));

  const nlohmann::json j = ReportToJson(r);
  EXPECT_EQ(j["settings"]["rate"], "5");
  EXPECT_EQ(j["requests_ok"], 1);
  EXPECT_EQ(j["output_tokens"], 5);
  EXPECT_DOUBLE_EQ(j["output_tokens_per_second"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["time_to_first_token_ms"]["p99"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["inter_token_latency_ms"]["p50"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["measured_seconds"].get<double>(), 0.5);
  EXPECT_EQ(j["errors"]["DEADLINE_EXCEEDED"], 1);
  EXPECT_EQ(j["total"]["output_tokens"], 5);
  EXPECT_EQ(j["total"]["errors"], 1);
}

}  // namespace
}  // namespace linserve::loadtest
