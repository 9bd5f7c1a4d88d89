// Replicas of the real linserve binary sharing one --state_dir, and a state_dir that fills up.
//
// Two replicas with a short idle timeout serve sessions that move between them on every turn
// while one or the other is SIGKILLed and restarted at random moments: no completed turn is ever
// lost, no session expires while it is used, and every file reads back whole. A state_dir on a
// tiny tmpfs: every request whose change did not fit fails naming the directory, /readyz says
// not ready, and after a SIGKILL every acknowledged change is there.
#include <signal.h>
#include <sys/mount.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kTurnTokens = 4;

v1::GenerateRequest Turn(const std::string& session, uint64_t seed) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(static_cast<int32_t>(65 + seed % 26));
  r.set_max_new_tokens(kTurnTokens);
  r.mutable_sampling()->set_seed(seed);
  r.set_ignore_eos(true);
  r.set_session_id(session);
  return r;
}

std::vector<std::string> ServerArgs(const std::string& model, const std::string& state_dir,
                                    const std::string& ports, const std::string& idle_timeout) {
  return {"--model=" + model,     "--host=127.0.0.1",
          "--port=0",             "--metrics_port=0",
          "--http_port=-1",       "--port_file=" + ports,
          "--state_dir=" + state_dir, "--session_idle_timeout=" + idle_timeout,
          "--drain_deadline=0s",  "--threads=1",
          "--log_level=warn"};
}

// One replica slot: the process running in it now, replaced when killed.
struct Replica {
  std::unique_ptr<ServerProcess> process;
  std::shared_ptr<Client> client;
};

class ReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ModelConfig config = TinyConfig();
    ASSERT_TRUE(
        WriteModelDirectory(dir_.Join("model"), config, MakeRandomWeights(config, 5)).ok());
  }
  std::unique_ptr<ServerProcess> Launch(const std::string& state_dir,
                                        const std::string& idle_timeout = "1h") {
    const std::string name = std::to_string(launched_++);
    auto server = std::make_unique<ServerProcess>(
        ServerArgs(dir_.Join("model"), state_dir, dir_.Join("ports" + name), idle_timeout),
        dir_.Join("log" + name), dir_.Join("ports" + name));
    EXPECT_TRUE(server->WaitForPorts(absl::Seconds(60))) << server->Log();
    return server;
  }

  ScopedTempDir dir_;
  int launched_ = 0;
};

TEST_F(ReplicasTest, SessionsMovingBetweenReplicasKilledAtRandomLoseNoCompletedTurn) {
  constexpr int kSessions = 4;
  constexpr int kKills = 12;
  const std::string state = dir_.Join("state");
  // Short enough that expiry runs many times during the test on the replica not serving a
  // session; every session is used far more often than that.
  const std::string idle_timeout = "4s";
  absl::Mutex mu;
  Replica replicas[2];
  for (Replica& r : replicas) {
    r.process = Launch(state, idle_timeout);
    r.client = r.process->Connect();
  }
  auto client_of = [&](int i) {
    absl::MutexLock lock(&mu);
    return replicas[i].client;
  };

  // What the clients know: each session's tokens as of its last acknowledged turn.
  std::vector<std::string> ids;
  std::vector<int64_t> acknowledged(kSessions, 0);
  for (int i = 0; i < kSessions; ++i) {
    absl::StatusOr<v1::Session> created = client_of(i % 2)->CreateSession();
    ASSERT_TRUE(created.ok()) << created.status();
    ids.push_back(created->id());
  }

  std::atomic<bool> done{false};
  std::atomic<int> completed{0}, unknown{0};
  std::vector<std::thread> drivers;
  std::vector<std::string> errors(kSessions);
  for (int s = 0; s < kSessions; ++s) {
    drivers.emplace_back([&, s] {
      std::mt19937 rng(100 + s);
      uint64_t seed = 1000 * s;
      while (!done) {
        // Each turn goes to either replica: the session moves between them all the time.
        std::shared_ptr<Client> client = client_of(static_cast<int>(rng() % 2));
        int64_t streamed = 0;
        const absl::Status status = client->Generate(Turn(ids[s], ++seed), [&](const auto& m) {
          streamed += m.tokens_size();
          return true;
        });
        if (status.ok()) {
          acknowledged[s] += 1 + kTurnTokens;
          ++completed;
          continue;
        }
        // Killed mid-turn, or the other replica still held the session: the turn is either
        // whole on disk or absent. Ask until a replica answers.
        ++unknown;
        for (int attempt = 0; attempt < 600 && !done; ++attempt) {
          absl::StatusOr<v1::Session> got = client_of(attempt % 2)->GetSession(ids[s]);
          if (!got.ok()) {
            if (absl::IsNotFound(got.status())) {
              errors[s] = "session lost: " + got.status().ToString();
              done = true;
              return;
            }
            absl::SleepFor(absl::Milliseconds(50));
            continue;
          }
          if (got->num_tokens() == acknowledged[s] + 1 + kTurnTokens) {
            acknowledged[s] = got->num_tokens();  // it completed on the server
          } else if (got->num_tokens() != acknowledged[s]) {
            errors[s] = "num_tokens " + std::to_string(got->num_tokens()) + ", acknowledged " +
                        std::to_string(acknowledged[s]);
            done = true;
          }
          break;
        }
      }
    });
  }

  std::mt19937 rng(7);
  for (int kill = 0; kill < kKills && !done; ++kill) {
    absl::SleepFor(absl::Milliseconds(std::uniform_int_distribution<int>(150, 700)(rng)));
    const int victim = static_cast<int>(rng() % 2);
    std::unique_ptr<ServerProcess> dead;
    {
      absl::MutexLock lock(&mu);
      dead = std::move(replicas[victim].process);
    }
    dead->Signal(SIGKILL);
    dead->WaitForExit(absl::Seconds(30));
    std::unique_ptr<ServerProcess> fresh = Launch(state, idle_timeout);
    std::shared_ptr<Client> client = fresh->Connect();
    absl::MutexLock lock(&mu);
    replicas[victim].process = std::move(fresh);
    replicas[victim].client = std::move(client);
  }
  done = true;
  for (std::thread& t : drivers) t.join();
  for (int s = 0; s < kSessions; ++s) EXPECT_EQ(errors[s], "") << "session " << ids[s];
  EXPECT_GT(completed.load(), 4 * kSessions);

  // Every file reads back whole: a fresh replica alone on the directory restores each session
  // with exactly its acknowledged tokens, and no temporary file is left once it started.
  for (Replica& r : replicas) {
    r.client.reset();
    r.process->Signal(SIGKILL);
    r.process->WaitForExit(absl::Seconds(30));
  }
  std::unique_ptr<ServerProcess> last = Launch(state, idle_timeout);
  std::unique_ptr<Client> client = last->Connect();
  for (int s = 0; s < kSessions; ++s) {
    absl::StatusOr<v1::Session> got = client->GetSession(ids[s]);
    ASSERT_TRUE(got.ok()) << got.status() << last->Log();
    EXPECT_EQ(got->num_tokens(), acknowledged[s]) << ids[s];
  }
  for (const auto& entry : std::filesystem::directory_iterator(state)) {
    EXPECT_FALSE(absl::EndsWith(entry.path().string(), ".tmp")) << entry.path();
  }
  RecordProperty("completed_turns", completed.load());
  RecordProperty("turns_cut_by_a_kill_or_a_lock", unknown.load());
}

// A tmpfs of its own for the state directory, unmounted at the end; the test is skipped where
// the machine does not let it mount one (not root, or no CAP_SYS_ADMIN in a container).
class TmpfsStateDir {
 public:
  TmpfsStateDir(const std::string& path, const std::string& size) : path_(path) {
    std::filesystem::create_directories(path);
    const std::string options = "size=" + size + ",mode=0700";
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~TmpfsStateDir() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  bool Resize(const std::string& size) {
    const std::string options = "size=" + size + ",mode=0700";
    return ::mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT, options.c_str()) == 0;
  }

 private:
  const std::string path_;
  bool mounted_ = false;
  std::string error_;
};

bool Ready(const ServerProcess& server) {
  httplib::Client http("127.0.0.1", server.metrics_port());
  httplib::Result result = http.Get("/readyz");
  return result && result->status == 200;
}

TEST_F(ReplicasTest, AFullStateDirFailsWhatItCannotKeepAndLosesNothingAcknowledged) {
  const std::string state = dir_.Join("tmpfs");
  // Room for the probe and a few sessions of the tiny model, not for many.
  TmpfsStateDir tmpfs(state, "96k");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << tmpfs.error();
  std::unique_ptr<ServerProcess> server = Launch(state);
  std::unique_ptr<Client> client = server->Connect();
  ASSERT_TRUE(Ready(*server));

  // Each session's tokens as acknowledged, and whether a turn of it failed (its change is not
  // acknowledged, and a later turn would build on it in memory: it is left alone from then on).
  struct Known {
    int64_t tokens = 0;
    bool failed = false;
  };
  std::map<std::string, Known> acknowledged;
  int failures = 0;
  uint64_t seed = 1;
  for (int i = 0; i < 200 && failures < 6; ++i) {
    absl::StatusOr<v1::Session> created = client->CreateSession();
    if (!created.ok()) {
      EXPECT_THAT(created.status().code(), AnyOf(absl::StatusCode::kResourceExhausted,
                                                 absl::StatusCode::kUnavailable));
      EXPECT_THAT(std::string(created.status().message()), HasSubstr(state));
      ++failures;
      continue;
    }
    acknowledged[created->id()] = {};
    for (auto& [id, known] : acknowledged) {
      if (known.failed) continue;
      const absl::Status status = client->Generate(Turn(id, ++seed), [](const auto&) {
        return true;
      });
      if (status.ok()) {
        known.tokens += 1 + kTurnTokens;
        continue;
      }
      EXPECT_THAT(status.code(), AnyOf(absl::StatusCode::kResourceExhausted,
                                       absl::StatusCode::kUnavailable))
          << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr(state));
      EXPECT_THAT(std::string(status.message()), HasSubstr("No space left on device"));
      ++failures;
      known.failed = true;
    }
  }
  ASSERT_GT(failures, 0) << "the state directory never filled up";
  EXPECT_FALSE(Ready(*server)) << "/readyz while writes fail";

  server->Signal(SIGKILL);
  server->WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(tmpfs.Resize("8m"));  // room to start again (its probe file) and to write
  std::unique_ptr<ServerProcess> restarted = Launch(state);
  std::unique_ptr<Client> after = restarted->Connect();
  int checked = 0;
  for (const auto& [id, known] : acknowledged) {
    absl::StatusOr<v1::Session> got = after->GetSession(id);
    ASSERT_TRUE(got.ok()) << id << ": " << got.status();
    // Acknowledged turns are all there; a failed one is not (the disk stayed full until the
    // kill, so its retries failed too).
    EXPECT_EQ(got->num_tokens(), known.tokens) << id;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_TRUE(Ready(*restarted));
}

}  // namespace
}  // namespace linserve
