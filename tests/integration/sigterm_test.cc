// SIGTERM on the real linserve binary: health goes NOT_SERVING, new work is refused, running
// streams finish or are cancelled by the drain deadline, every session is persisted, the
// process exits 0, and a restarted server continues the sessions exactly.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

extern char** environ;

namespace linserve {
namespace {

using ServingStatus = grpc::health::v1::HealthCheckResponse;

// One linserve process with its output in a log file.
class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& args, const std::string& log,
                const std::string& port_file)
      : log_(log), port_file_(port_file) {
    std::vector<char*> argv;
    std::string binary = LINSERVE_SERVER_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> owned = args;
    for (std::string& a : owned) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    // The test process blocks nothing, but gRPC threads may; the child starts clean.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
    spawned_ = posix_spawn(&pid_, binary.c_str(), &actions, &attributes, argv.data(), environ) == 0;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  ~ServerProcess() {
    if (spawned_ && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  bool spawned() const { return spawned_; }

  // Waits for --port_file; false on timeout or early exit.
  bool WaitForPorts(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      std::ifstream in(port_file_);
      std::string line;
      while (std::getline(in, line)) {
        std::vector<std::string> kv = absl::StrSplit(line, '=');
        int value = 0;
        if (kv.size() == 2 && absl::SimpleAtoi(kv[1], &value)) {
          (kv[0] == "grpc_port" ? grpc_port_ : metrics_port_) = value;
        }
      }
      if (grpc_port_ > 0) return true;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        exited_ = true;
        return false;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // The exit status, or -1 if the process did not exit normally within `timeout`.
  int WaitForExit(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

  void Signal(int signal) { kill(pid_, signal); }
  int grpc_port() const { return grpc_port_; }
  std::string Log() const {
    std::ifstream in(log_);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

 private:
  const std::string log_;
  const std::string port_file_;
  pid_t pid_ = -1;
  bool spawned_ = false;
  bool exited_ = false;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

std::unique_ptr<Client> ConnectTo(const ServerProcess& server) {
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", server.grpc_port());
  return *Client::Create(options);
}

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
        "--port_file=" + port_file, "--state_dir=" + dir.Join("state"),
        "--drain_deadline=2s", "--threads=1", "--max_new_tokens=1000000"};
  };
  const std::vector<int32_t> p1 = {76, 105, 110}, p2 = {101, 97};

  std::string id;
  std::vector<int32_t> g1;
  {
    ServerProcess server(args(dir.Join("ports1")), dir.Join("log1"), dir.Join("ports1"));
    ASSERT_TRUE(server.spawned());
    ASSERT_TRUE(server.WaitForPorts(absl::Seconds(60))) << server.Log();
    std::unique_ptr<Client> client = ConnectTo(server);
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
  std::unique_ptr<Client> client = ConnectTo(server);
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
