// What an oversized text prompt costs the real linserve binary (bundled model, SentencePiece):
// the byte limit refuses it before any tokenizing, so four 4 MB prompts at once neither keep
// the server's memory nor slow an unrelated stream. Before the limit each was tokenized whole:
// ~3 s and +570 MB RSS apiece, and a 200-token stream went from 0.22 s to 7.2 s.
//
// The server is a child process so that its RSS (/proc/<pid>/status) excludes the test's own
// clients and their copies of the prompts; it decodes on one thread (--threads=1), leaving the
// other core of a 2-core machine to the transport.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_process.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// "4 MB": under gRPC's default 4 MiB limit on a received message (which the server keeps), so
// that the message reaches the server's own check rather than gRPC's. gRPC's receive buffers
// count: the server holds each message twice (received bytes, parsed request) until the
// rejection frees them, so four at once peak at about 30 MB over the baseline; the 50 MB
// bound is on what stays after.
constexpr size_t kBadPromptBytes = 4000000;
constexpr int kBadPrompts = 4;
constexpr int kStreamTokens = 200;
constexpr int kRepetitions = 7;
// How much slower the stream may be beside the bad prompts (see the test).
constexpr double kMaxSlowdown = 6;

// Resident memory of `pid` in KiB (VmRSS or, with "VmHWM:", its peak), -1 if unreadable.
int64_t StatusKib(pid_t pid, const std::string& key = "VmRSS:") {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, key)) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    int64_t kib = -1;
    return absl::SimpleAtoi(digits, &kib) ? kib : -1;
  }
  return -1;
}

// CPU time `pid` has used (user + system, all threads), seconds; clock-tick resolution.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  if (fields.size() < 13) return -1;
  int64_t utime = 0;
  int64_t stime = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

class PromptCostTest : public ::testing::Test {
 protected:
  void StartServer(const std::vector<std::string>& extra_flags) {
    std::vector<std::string> flags = {"--device=cpu",
                                      "--host=127.0.0.1",
                                      "--port=0",
                                      "--metrics_port=-1",
                                      "--http_port=-1",
                                      "--threads=1",
                                      "--log_level=warn",
                                      "--port_file=" + dir_.Join("ports")};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    server_ = std::make_unique<ServerProcess>(flags, dir_.Join("log"), dir_.Join("ports"));
    ASSERT_TRUE(server_->WaitForPorts(absl::Seconds(60))) << server_->Log();
  }

  ScopedTempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

// A 200-token stream; its wall time in seconds, or a failure.
double TimeStream(Client& client) {
  v1::GenerateRequest request;
  request.set_text("Once upon a time");
  request.set_max_new_tokens(kStreamTokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_seed(5);
  int tokens = 0;
  const absl::Time start = absl::Now();
  const absl::Status status = client.Generate(request, [&](const v1::GenerateResponse& m) {
    tokens += m.tokens_size();
    return true;
  });
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(tokens, kStreamTokens);
  return seconds;
}

TEST_F(PromptCostTest, FourPromptsOf4MbCostNeitherMemoryNorAConcurrentStreamsTime) {
  ASSERT_NO_FATAL_FAILURE(StartServer({}));  // every limit at its default
  std::unique_ptr<Client> client = server_->Connect();
  // Unrelated clients: their own connections.
  std::vector<std::unique_ptr<Client>> bad_clients;
  for (int i = 0; i < kBadPrompts; ++i) bad_clients.push_back(server_->Connect());

  v1::GenerateRequest bad;
  {
    std::string text;
    text.reserve(kBadPromptBytes);
    while (text.size() < kBadPromptBytes) text += "word ";
    text.resize(kBadPromptBytes);
    bad.set_text(std::move(text));
    bad.set_max_new_tokens(1);
  }
  auto send_bad_prompts = [&] {
    std::vector<absl::Status> statuses(kBadPrompts);
    std::vector<std::thread> threads;
    for (int i = 0; i < kBadPrompts; ++i) {
      threads.emplace_back([&, i] {
        statuses[i] =
            bad_clients[i]->Generate(bad, [](const v1::GenerateResponse&) { return true; });
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : statuses) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("prompt.text: 4000000 bytes exceed"));
      EXPECT_THAT(std::string(s.message()), HasSubstr("max_prompt_bytes"));
    }
  };

  // Warm up (connections, the model's pages, the allocator), then the baseline; the peak
  // (VmHWM) is reset so that it shows the peak under the bad load.
  for (int i = 0; i < 2; ++i) TimeStream(*client);
  for (auto& c : bad_clients) ASSERT_TRUE(c->GetModelInfo().ok());
  const int64_t baseline_kib = StatusKib(server_->pid());
  ASSERT_GT(baseline_kib, 0);
  std::ofstream(absl::StrCat("/proc/", server_->pid(), "/clear_refs")) << "5";

  // The stream alone and under the bad load in turn, so that whatever else loads the machine
  // weighs on both alike; medians shrug off the odd slow run. Wall time on a shared 2-core
  // machine is noisy, so a measurement over the bound is taken again, up to kAttempts times:
  // the defect this guards against (each prompt tokenized whole: x30) fails every attempt.
  // Refusing the prompts is not free (gRPC receives 16 MB on the core the stream's transport
  // uses): with another test busy beside it the ratio measured x1.34-1.74, and x2.6-4.3 with the
  // machine's load average at 14 (five builds beside it), so the bound is kMaxSlowdown, far from
  // the defect's x30 and clear of that noise.
  constexpr int kAttempts = 3;
  double best_ratio = 0;
  int64_t largest_after_kib = 0;
  double stream_cpu = 0;
  int streams = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::vector<double> alone;
    std::vector<double> loaded;
    for (int rep = 0; rep < kRepetitions; ++rep) {
      const double cpu_before = CpuSeconds(server_->pid());
      alone.push_back(TimeStream(*client));
      stream_cpu += CpuSeconds(server_->pid()) - cpu_before;
      ++streams;
      std::thread load(send_bad_prompts);
      loaded.push_back(TimeStream(*client));
      load.join();
      largest_after_kib = std::max(largest_after_kib, StatusKib(server_->pid()));
    }
    const double ratio = Median(loaded) / Median(alone);
    std::printf(
        "%d-token stream, median of %d: alone %.3f s, with %d concurrent %zu-byte "
        "prompts %.3f s (x%.3f)\n",
        kStreamTokens, kRepetitions, Median(alone), kBadPrompts, kBadPromptBytes, Median(loaded),
        ratio);
    best_ratio = attempt == 0 ? ratio : std::min(best_ratio, ratio);
    if (best_ratio <= kMaxSlowdown) break;
  }
  const int64_t after_kib = StatusKib(server_->pid());
  const int64_t peak_kib = StatusKib(server_->pid(), "VmHWM:");

  // For the record: what the bad prompts cost by themselves, in wall time and server CPU.
  std::vector<double> burst;
  const double burst_cpu_before = CpuSeconds(server_->pid());
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const absl::Time start = absl::Now();
    send_bad_prompts();
    burst.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  const double burst_cpu = (CpuSeconds(server_->pid()) - burst_cpu_before) / kRepetitions;
  std::printf(
      "the %d bad prompts alone: median %.3f s wall, server CPU %.1f ms (a stream: "
      "%.1f ms)\n",
      kBadPrompts, Median(burst), 1e3 * burst_cpu, 1e3 * stream_cpu / streams);
  std::printf(
      "server RSS: baseline %.1f MiB, after the bad prompts %+.1f MiB (largest between "
      "rounds %+.1f MiB, peak %+.1f MiB)\n",
      baseline_kib / 1024.0, (after_kib - baseline_kib) / 1024.0,
      (largest_after_kib - baseline_kib) / 1024.0, (peak_kib - baseline_kib) / 1024.0);
  EXPECT_LE(largest_after_kib - baseline_kib, 50 * 1024);
  EXPECT_LE(after_kib - baseline_kib, 50 * 1024);
  EXPECT_LE(best_ratio, kMaxSlowdown);
}

TEST_F(PromptCostTest, TheLimitsComeFromTheFlagsAndNameThemselves) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--max_prompt_bytes=1000", "--max_prompt_tokens=50"}));
  std::unique_ptr<Client> client = server_->Connect();
  v1::GenerateRequest request;
  request.set_max_new_tokens(1);

  request.set_text(std::string(1001, 'a'));
  absl::Status status = client->Generate(request, [](const v1::GenerateResponse&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "prompt.text: 1001 bytes exceed the limit of 1000 (max_prompt_bytes)");
  EXPECT_EQ(client->Tokenize(std::string(1001, 'a')).status().message(),
            "text: 1001 bytes exceed the limit of 1000 (max_prompt_bytes)");

  // Under the byte limit, over the token limit: refused once 50 tokens are passed.
  std::string words;
  while (words.size() < 990) words += "linear ";
  request.set_text(words);
  status = client->Generate(request, [](const v1::GenerateResponse&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "prompt.text: has more tokens than the limit of 50 (max_prompt_tokens)");
  EXPECT_EQ(client->Tokenize(words).status().code(), absl::StatusCode::kInvalidArgument);

  // Within both: served.
  request.set_text("linear attention");
  EXPECT_TRUE(client->Generate(request, [](const v1::GenerateResponse&) { return true; }).ok());
  absl::StatusOr<std::vector<int32_t>> ids = client->Tokenize("linear attention");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_FALSE(ids->empty());
}

TEST_F(PromptCostTest, TheDefaultByteLimitIsSixteenBytesPerPromptToken) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--max_prompt_tokens=100"}));
  std::unique_ptr<Client> client = server_->Connect();
  std::string words;
  while (words.size() < 1601) words += "wherefore ";
  words.resize(1601);
  EXPECT_EQ(client->Tokenize(words).status().message(),
            "text: 1601 bytes exceed the limit of 1600 (max_prompt_bytes)");
  // 1600 bytes pass the byte limit; the bundled model's pieces are at most 14 bytes, so they
  // cannot fit 100 tokens and the token limit refuses them.
  words.resize(1600);
  EXPECT_EQ(client->Tokenize(words).status().message(),
            "text: has more tokens than the limit of 100 (max_prompt_tokens)");
}

}  // namespace
}  // namespace linserve
