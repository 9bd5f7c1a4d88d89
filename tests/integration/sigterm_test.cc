// SIGTERM on the real linserve binary: health goes NOT_SERVING, new work is refused, running
// streams finish or are cancelled by the drain deadline, every session is persisted, the
// process exits 0, and a restarted server continues the sessions exactly.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ServingStatus = grpc::health::v1::HealthCheckResponse;

v1::GenerateRequest Tokens(const std::vector<int32_t>& prompt, int32_t n, uint64_t seed,
                           const std::string& session = "") {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.set_max_new_tokens(n);
  r.mutable_sampling()->set_seed(seed);
  r.set_ignore_eos(true);
  r.set_session_id(session);
  return r;
}

std::vector<int32_t> Generate(Client& client, const v1::GenerateRequest& request,
                              absl::Status* status) {
  std::vector<int32_t> tokens;
  *status = client.Generate(request, [&](const v1::GenerateResponse& m) {
    for (const auto& t : m.tokens()) tokens.push_back(t.id());
    return true;
  });
  return tokens;
}

TEST(SigtermTest, DrainsPersistsAndRestores) {
  ScopedTempDir dir;
  const ModelConfig config = TinyConfig();
  ASSERT_TRUE(
      WriteModelDirectory(dir.Join("model"), config, MakeRandomWeights(config, 11)).ok());
  auto args = [&](const std::string& port_file) {
    return std::vector<std::string>{
        "--model=" + dir.Join("model"), "--host=127.0.0.1", "--port=0", "--metrics_port=0",
        "--http_port=-1", "--port_file=" + port_file, "--state_dir=" + dir.Join("state"),
        "--drain_deadline=2s", "--threads=1", "--max_new_tokens=1000000",
        // One-token attention chunks: a session's turns and one request over its whole
        // history then reach bitwise the same state (crash_test.cc says why).
        "--prefill_chunk_size=1"};
  };
  const std::vector<int32_t> p1 = {76, 105, 110}, p2 = {101, 97};

  std::string id;
  std::vector<int32_t> g1;
  {
    ServerProcess server(args(dir.Join("ports1")), dir.Join("log1"), dir.Join("ports1"));
    ASSERT_TRUE(server.spawned());
    ASSERT_TRUE(server.WaitForPorts(absl::Seconds(60))) << server.Log();
    std::unique_ptr<Client> client = server.Connect();
    id = client->CreateSession()->id();
    absl::Status status;
    g1 = Generate(*client, Tokens(p1, 16, 1, id), &status);
    ASSERT_TRUE(status.ok()) << status;

    // A stream far too long to finish within the drain deadline.
    std::atomic<bool> streaming{false};
    absl::Mutex mu;
    v1::GenerateResponse last;
    std::unique_ptr<GenerateStream> long_stream =
        client->StartGenerate(Tokens({1, 2}, 1000000, 5), [&](const v1::GenerateResponse& m) {
          streaming = true;
          absl::MutexLock lock(&mu);
          last = m;
        });
    while (!streaming) absl::SleepFor(absl::Milliseconds(5));

    server.Signal(SIGTERM);
    // Draining: not serving, no new work, but the stream keeps going until the deadline.
    absl::StatusOr<ServingStatus::ServingStatus> health = client->CheckHealth();
    for (int i = 0; i < 100 && health.ok() && *health == ServingStatus::SERVING; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      health = client->CheckHealth();
    }
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, ServingStatus::NOT_SERVING);
    Generate(*client, Tokens({3}, 2, 0), &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

    EXPECT_TRUE(long_stream->Wait().ok());
    {
      absl::MutexLock lock(&mu);
      EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_CANCELLED);
      EXPECT_GT(last.usage().generated_tokens(), 0);
    }
    EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 0) << server.Log();
    EXPECT_THAT(server.Log(), ::testing::HasSubstr("persisted 1 sessions"));
  }
  EXPECT_TRUE(std::filesystem::exists(dir.Join("state") + "/" + id + ".session"));

  ServerProcess server(args(dir.Join("ports2")), dir.Join("log2"), dir.Join("ports2"));
  ASSERT_TRUE(server.WaitForPorts(absl::Seconds(60))) << server.Log();
  std::unique_ptr<Client> client = server.Connect();
  absl::StatusOr<v1::Session> restored = client->GetSession(id);
  ASSERT_TRUE(restored.ok()) << restored.status() << server.Log();
  EXPECT_EQ(restored->num_tokens(), static_cast<int64_t>(p1.size() + g1.size()));
  absl::Status status;
  const std::vector<int32_t> continued = Generate(*client, Tokens(p2, 16, 2, id), &status);
  ASSERT_TRUE(status.ok()) << status;
  std::vector<int32_t> whole = p1;
  whole.insert(whole.end(), g1.begin(), g1.end());
  whole.insert(whole.end(), p2.begin(), p2.end());
  EXPECT_EQ(Generate(*client, Tokens(whole, 16, 2), &status), continued);
  server.Signal(SIGINT);
  EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 0) << server.Log();
}

}  // namespace
}  // namespace linserve
