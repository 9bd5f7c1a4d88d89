#include "client/loadtest/load_generator.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::loadtest {
namespace {

using ::testing::HasSubstr;

// A simulated server: emits max_new_tokens tokens one message each, fails every
// `fail_every`-th Generate with RESOURCE_EXHAUSTED, and with `block` holds every Generate until
// CancelAll.
class FakeTarget : public LoadTarget {
 public:

  int fail_every = 0;
  bool block = false;
  absl::Duration per_request = absl::ZeroDuration();

  GenerateOutcome Generate(const GenerateCall& call,
                           absl::FunctionRef<void(int32_t)> on_tokens) override {
    const int now = ++in_flight_;
    int seen = max_in_flight_.load();
    while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
    }
    int index = 0;
    {
      absl::MutexLock lock(&mu_);
      index = static_cast<int>(calls_.size());
      calls_.push_back(call);
      if (!call.session_id.empty()) ++turns_[call.session_id];
    }
    GenerateOutcome outcome;
    if (block) {
      cancelled_.WaitForNotification();
      outcome.status = absl::CancelledError("cancelled");
    } else if (fail_every > 0 && (index + 1) % fail_every == 0) {
      outcome.status = absl::ResourceExhaustedError("queue full");
    } else {
      if (per_request > absl::ZeroDuration()) absl::SleepFor(per_request);
      for (int32_t i = 0; i < call.max_new_tokens; ++i) {
        outcome.tokens.push_back(100 + index * 10 + i);  // tells replies apart
        on_tokens(1);
      }
      outcome.prompt_tokens = static_cast<int64_t>(call.prompt.size());
      // As a server with a prefix cache would: all but the newest 4 tokens were cached.
      outcome.cached_prompt_tokens = std::max<int64_t>(outcome.prompt_tokens - 4, 0);
    }
    --in_flight_;
    return outcome;
  }
  absl::StatusOr<std::string> CreateSession(absl::Duration) override {
    absl::MutexLock lock(&mu_);
    const std::string id = absl::StrCat("s", next_id_++);
    live_.insert(id);
    created_.push_back(id);
    return id;
  }
  absl::StatusOr<std::string> ForkSession(const std::string& id, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (!live_.count(id)) return absl::NotFoundError(id);
    const std::string fork = absl::StrCat("f", next_id_++);
    live_.insert(fork);
    forks_[id] = fork;
    return fork;
  }
  absl::StatusOr<int64_t> ExportSession(const std::string& id, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (!live_.count(id)) return absl::NotFoundError(id);
    exported_.insert(id);
    return 1234;
  }
  absl::Status DeleteSession(const std::string& id, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (!live_.erase(id)) return absl::NotFoundError(id);
    return absl::OkStatus();
  }
  void CancelAll() override {
    if (!cancelled_.HasBeenNotified()) cancelled_.Notify();
  }

  std::vector<GenerateCall> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int max_in_flight() const { return max_in_flight_.load(); }

  absl::Mutex mu_;
  std::vector<GenerateCall> calls_;
  std::map<std::string, int> turns_;
  std::set<std::string> live_;
  std::vector<std::string> created_;
  std::map<std::string, std::string> forks_;
  std::set<std::string> exported_;
  int next_id_ = 0;

 private:
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  absl::Notification cancelled_;
};

LoadOptions Base() {
  LoadOptions o;
  o.vocab_size = 16;
  o.excluded_ids = {0, 15};
  o.prompt_tokens = Distribution::Fixed(4);
  o.output_tokens = Distribution::Fixed(5);
  o.duration = absl::Seconds(60);
  o.drain_timeout = absl::Seconds(5);
  return o;
}

TEST(LoadGeneratorTest, ClosedLoopStopsAtTheRequestBound) {
  FakeTarget target;
  LoadOptions o = Base();
  o.concurrency = 4;
  o.max_requests = 50;
  ASSERT_TRUE(ValidateLoadOptions(o).ok());
  const LoadResult result = RunLoad(target, o);
  ASSERT_EQ(result.requests.size(), 50u);
  EXPECT_EQ(target.calls().size(), 50u);
  EXPECT_LE(target.max_in_flight(), 4);
  for (const GenerateRecord& r : result.requests) {
    EXPECT_TRUE(r.measured);
    EXPECT_EQ(r.code, absl::StatusCode::kOk);
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.prompt_tokens, 4);
    EXPECT_EQ(r.inter_token_s.size(), 4u);
    EXPECT_GE(r.first_token_s, r.start_s);
    EXPECT_GE(r.end_s, r.first_token_s);
  }
  EXPECT_TRUE(result.operations.empty());
  EXPECT_EQ(result.window_start_s, 0);
  EXPECT_GT(result.window_end_s, 0);
  const LoadReport report =
      BuildReport({}, result.requests, result.operations, result.window_start_s,
                  result.window_end_s, result.dropped_arrivals);
  EXPECT_EQ(report.total_output_tokens, 250);
  // The window closes when the bound refuses a request; calls still in flight then finish
  // during the drain, outside it.
  EXPECT_LE(report.output_tokens, 250);
  EXPECT_EQ(report.requests_ok, 50);
}

TEST(LoadGeneratorTest, ResendConversationsSendTheWholeHistoryEveryTurn) {
  FakeTarget target;
  LoadOptions o = Base();
  o.concurrency = 1;
  o.turns = 3;
  o.resend = true;
  o.max_requests = 6;
  ASSERT_TRUE(ValidateLoadOptions(o).ok());
  const LoadResult result = RunLoad(target, o);
  const std::vector<GenerateCall> calls = target.calls();
  ASSERT_EQ(calls.size(), 6u);
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(calls[i].session_id.empty());
    const size_t turn = i % 3;
    // Turn k: k earlier prompts of 4 and replies of 5, then 4 new tokens.
    ASSERT_EQ(calls[i].prompt.size(), 4 + turn * 9);
    if (turn == 0) continue;
    const std::vector<int32_t>& before = calls[i - 1].prompt;
    EXPECT_TRUE(std::equal(before.begin(), before.end(), calls[i].prompt.begin()));
    for (int32_t k = 0; k < 5; ++k) {
      EXPECT_EQ(calls[i].prompt[before.size() + k], 100 + static_cast<int32_t>(i - 1) * 10 + k);
    }
  }
  const LoadReport report =
      BuildReport({}, result.requests, result.operations, result.window_start_s,
                  result.window_end_s, result.dropped_arrivals);
  EXPECT_EQ(report.prompt_tokens, 2 * (4 + 13 + 22));
  EXPECT_EQ(report.cached_prompt_tokens, 2 * (0 + 9 + 18));
  EXPECT_EQ(ReportToJson(report)["cached_prompt_tokens"], 2 * (0 + 9 + 18));
  EXPECT_THAT(FormatReport(report), HasSubstr("78 (54 cached)"));

  LoadOptions single = Base();
  single.resend = true;
  EXPECT_THAT(ValidateLoadOptions(single).message(), HasSubstr("--turns"));
  LoadOptions fork = o;
  fork.fork = true;
  EXPECT_THAT(ValidateLoadOptions(fork).message(), HasSubstr("--fork"));
}

TEST(LoadGeneratorTest, RequestsFollowTheDistributionsAndAvoidExcludedIds) {
  FakeTarget target;
  LoadOptions o = Base();
  o.concurrency = 2;
  o.max_requests = 200;
  o.prompt_tokens = *Distribution::Parse("uniform:3:9", "--prompt-tokens", 1, 100);
  o.output_tokens = *Distribution::Parse("normal:6:2", "--output-tokens", 1, 10);
  o.temperature = 0.5f;
  o.top_k = 50;
  o.top_p = 0.9f;
  o.ignore_eos = false;
  o.request_timeout = absl::Seconds(7);
  RunLoad(target, o);
  std::set<size_t> prompt_lengths;
  std::set<uint64_t> seeds;
  for (const GenerateCall& call : target.calls()) {
    EXPECT_TRUE(call.session_id.empty());
    EXPECT_GE(call.prompt.size(), 3u);
    EXPECT_LE(call.prompt.size(), 9u);
    prompt_lengths.insert(call.prompt.size());
    for (int32_t id : call.prompt) {
      EXPECT_GT(id, 0);
      EXPECT_LT(id, 15);
    }
    EXPECT_GE(call.max_new_tokens, 1);
    EXPECT_LE(call.max_new_tokens, 10);
    EXPECT_EQ(call.temperature, 0.5f);
    EXPECT_EQ(call.top_k, 50);
    EXPECT_EQ(call.top_p, 0.9f);
    EXPECT_FALSE(call.ignore_eos);
    EXPECT_EQ(call.timeout, absl::Seconds(7));
    seeds.insert(call.seed);
  }
  EXPECT_EQ(prompt_lengths.size(), 7u);
  EXPECT_EQ(seeds.size(), 200u);
}

TEST(LoadGeneratorTest, SameSeedSameWorkload) {
  auto run = [](uint64_t seed) {
    FakeTarget target;
    LoadOptions o = Base();
    o.concurrency = 1;
    o.max_requests = 20;
    o.seed = seed;
    o.prompt_tokens = *Distribution::Parse("uniform:1:20", "--prompt-tokens", 1, 100);
    RunLoad(target, o);
    std::vector<std::vector<int32_t>> prompts;
    for (const GenerateCall& call : target.calls()) prompts.push_back(call.prompt);
    return prompts;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(LoadGeneratorTest, FailuresAreRecordedWithTheirCode) {
  FakeTarget target;
  target.fail_every = 3;
  LoadOptions o = Base();
  o.concurrency = 1;
  o.max_requests = 9;
  const LoadResult result = RunLoad(target, o);
  ASSERT_EQ(result.requests.size(), 9u);
  int failed = 0;
  for (const GenerateRecord& r : result.requests) {
    if (r.code == absl::StatusCode::kResourceExhausted) {
      ++failed;
      EXPECT_EQ(r.output_tokens, 0);
      EXPECT_LT(r.first_token_s, 0);
    }
  }
  EXPECT_EQ(failed, 3);
  const LoadReport report =
      BuildReport({}, result.requests, {}, result.window_start_s, result.window_end_s, 0);
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), 3);
  // One stream: each request ended before the next began, all inside the window.
  EXPECT_EQ(report.output_tokens, 6 * 5);
}

TEST(LoadGeneratorTest, SessionsRunTheirTurnsForkExportAndAreDeleted) {
  FakeTarget target;
  LoadOptions o = Base();
  o.concurrency = 2;
  o.turns = 3;
  o.fork = true;
  o.export_session = true;
  o.max_requests = 40;
  o.think_time_ms = *Distribution::Parse("uniform:0:2", "--think-time-ms", 0, 1000);
  ASSERT_TRUE(ValidateLoadOptions(o).ok());
  const LoadResult result = RunLoad(target, o);
  EXPECT_EQ(result.requests.size(), 40u);
  EXPECT_TRUE(target.live_.empty()) << "every created and forked session is deleted";
  // The request bound can cut the last sessions of each stream short (it stops new work
  // between any two requests), but every whole session ran 3 turns, then 1 on its fork.
  int complete = 0;
  int turns = 0;
  for (const std::string& id : target.created_) {
    EXPECT_LE(target.turns_[id], 3);
    turns += target.turns_[id];
    if (target.forks_.count(id)) {
      EXPECT_EQ(target.turns_[id], 3);
      EXPECT_LE(target.turns_[target.forks_[id]], 1);
      turns += target.turns_[target.forks_[id]];
      if (target.turns_[target.forks_[id]] == 1) ++complete;
    }
  }
  EXPECT_EQ(turns, 40);
  EXPECT_GE(complete, 7);
  EXPECT_GE(static_cast<int>(target.exported_.size()), complete - 2);
  std::map<std::string, int> ops;
  for (const OperationRecord& op : result.operations) {
    EXPECT_EQ(op.code, absl::StatusCode::kOk) << op.op;
    ++ops[op.op];
    if (op.op == "export") {
      EXPECT_EQ(op.bytes, 1234);
    }
  }
  EXPECT_EQ(ops["create"], static_cast<int>(target.created_.size()));
  EXPECT_EQ(ops["fork"], static_cast<int>(target.forks_.size()));
  EXPECT_EQ(ops["delete"], ops["create"] + ops["fork"]);
  EXPECT_EQ(ops["export"], static_cast<int>(target.exported_.size()));
}

TEST(LoadGeneratorTest, OpenLoopArrivalsAndDrops) {
  FakeTarget target;
  LoadOptions o = Base();
  o.mode = LoadOptions::Mode::kOpen;
  o.rate = 200;
  o.duration = absl::Milliseconds(500);
  const LoadResult result = RunLoad(target, o);
  // A Poisson count of mean 100 (sd 10).
  EXPECT_GT(result.requests.size(), 40u);
  EXPECT_LT(result.requests.size(), 160u);
  EXPECT_EQ(result.dropped_arrivals, 0);

  FakeTarget slow;
  slow.per_request = absl::Milliseconds(50);
  o.max_inflight = 1;
  o.rate = 1000;
  o.duration = absl::Milliseconds(300);
  const LoadResult dropped = RunLoad(slow, o);
  EXPECT_EQ(slow.max_in_flight(), 1);
  EXPECT_GT(dropped.dropped_arrivals, 0);
  EXPECT_GE(dropped.requests.size(), 1u);
}

TEST(LoadGeneratorTest, WarmUpRequestsAreMarked) {
  FakeTarget target;
  target.per_request = absl::Milliseconds(2);
  LoadOptions o = Base();
  o.concurrency = 2;
  o.warmup = absl::Milliseconds(300);
  o.duration = absl::Milliseconds(300);
  const LoadResult result = RunLoad(target, o);
  int warm = 0;
  int measured = 0;
  for (const GenerateRecord& r : result.requests) {
    EXPECT_EQ(r.measured, r.start_s >= 0.3) << r.start_s;
    (r.measured ? measured : warm)++;
  }
  EXPECT_GT(warm, 0);
  EXPECT_GT(measured, 0);
}

TEST(LoadGeneratorTest, CallsThatOutliveTheDrainTimeoutAreCancelled) {
  FakeTarget target;
  target.block = true;
  LoadOptions o = Base();
  o.concurrency = 3;
  o.duration = absl::Milliseconds(100);
  o.drain_timeout = absl::Milliseconds(100);
  const LoadResult result = RunLoad(target, o);
  ASSERT_EQ(result.requests.size(), 3u);
  for (const GenerateRecord& r : result.requests) {
    EXPECT_EQ(r.code, absl::StatusCode::kCancelled);
  }
}

TEST(LoadGeneratorTest, ProgressLineReportsCounts) {
  FakeTarget target;
  LoadOptions o = Base();
  o.concurrency = 1;
  o.max_requests = 10;
  char* buffer = nullptr;
  size_t size = 0;
  FILE* progress = open_memstream(&buffer, &size);
  o.progress = progress;
  RunLoad(target, o);
  std::fclose(progress);
  const std::string text(buffer, size);
  free(buffer);
  EXPECT_THAT(text, HasSubstr("requests 10, errors 0, output tokens 50,"));
  EXPECT_THAT(text, HasSubstr("tok/s"));
}

TEST(ValidateLoadOptionsTest, NamesTheFlagAndLimit) {
  struct Case {
    void (*edit)(LoadOptions&);
    std::string message;
  } cases[] = {
      {[](LoadOptions& o) { o.concurrency = 0; }, "--concurrency=0 is outside [1, 4096]"},
      {[](LoadOptions& o) { o.rate = 0; }, "--rate=0 is outside (0, 1e6]"},
      {[](LoadOptions& o) { o.max_inflight = 5000; }, "--max-inflight=5000"},
      {[](LoadOptions& o) { o.turns = -1; }, "--turns=-1"},
      {[](LoadOptions& o) { o.fork = true; }, "--fork and --export need a session workload"},
      {[](LoadOptions& o) { o.duration = absl::ZeroDuration(); }, "--duration=0"},
      {[](LoadOptions& o) { o.max_requests = -2; }, "--requests=-2"},
      {[](LoadOptions& o) { o.warmup = absl::Seconds(-1); }, "--warmup=-1"},
      {[](LoadOptions& o) { o.request_timeout = absl::ZeroDuration(); }, "--request-timeout=0"},
      {[](LoadOptions& o) { o.temperature = -1; }, "--temperature=-1"},
      {[](LoadOptions& o) { o.top_k = -1; }, "--top-k=-1"},
      {[](LoadOptions& o) { o.top_p = 0; }, "--top-p=0 is outside (0, 1]"},
      {[](LoadOptions& o) { o.top_p = 1.5f; }, "--top-p=1.5"},
      {[](LoadOptions& o) { o.vocab_size = 2; }, "vocabulary (2 ids)"},
  };
  for (const Case& c : cases) {
    LoadOptions o = Base();
    c.edit(o);
    const absl::Status status = ValidateLoadOptions(o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(ValidateLoadOptions(Base()).ok());
}

}  // namespace
}  // namespace linserve::loadtest
