// Restarts of the real linserve binary change nothing a client can see (issue #18): every field
// of every session is kept, sessions idle past the timeout while the server was down are gone
// at the start (their files too), and the port file exists only while the server does. A
// session SIGKILLed after its acknowledged turns continues with exactly the tokens of an
// uninterrupted run, on TinyConfig's model and on TinyBasedConfig's.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

class RestartTest : public ::testing::Test {
 protected:
  virtual ModelConfig Config() const { return TinyConfig(); }
  void SetUp() override {
    const ModelConfig config = Config();
    ASSERT_TRUE(
        WriteModelDirectory(dir_.Join("model"), config, MakeRandomWeights(config, 5)).ok());
  }
  std::unique_ptr<ServerProcess> Start(const std::string& name,
                                       const std::string& idle_timeout = "1h",
                                       const std::vector<std::string>& more_flags = {}) {
    std::vector<std::string> flags = {"--model=" + dir_.Join("model"), "--host=127.0.0.1",
                                      "--port=0", "--metrics_port=0", "--http_port=-1",
                                      "--port_file=" + PortFile(),
                                      "--state_dir=" + dir_.Join("state"), "--threads=1",
                                      "--session_idle_timeout=" + idle_timeout};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    auto server = std::make_unique<ServerProcess>(flags, dir_.Join(name), PortFile());
    EXPECT_TRUE(server->WaitForPorts(absl::Seconds(60))) << server->Log();
    return server;
  }
  std::string PortFile() const { return dir_.Join("ports"); }

  ScopedTempDir dir_;
};

v1::GenerateRequest Tokens(const std::vector<int32_t>& prompt, const std::string& session) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.set_max_new_tokens(5);
  r.set_session_id(session);
  return r;
}

std::map<std::string, v1::Session> AllSessions(Client& client) {
  std::map<std::string, v1::Session> out;
  absl::StatusOr<v1::ListSessionsResponse> page = client.ListSessions(100, "");
  EXPECT_TRUE(page.ok()) << page.status();
  if (page.ok()) {
    for (const v1::Session& s : page->sessions()) out[s.id()] = s;
  }
  return out;
}

class RestartModelsTest : public RestartTest, public ::testing::WithParamInterface<std::string> {
 protected:
  ModelConfig Config() const override {
    return GetParam() == "based" ? TinyBasedConfig() : TinyConfig();
  }
};

INSTANTIATE_TEST_SUITE_P(Models, RestartModelsTest, ::testing::Values("tiny", "based"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::vector<int32_t> Turn(Client& client, const std::vector<int32_t>& prompt,
                          const std::string& session, uint64_t seed) {
  v1::GenerateRequest r = Tokens(prompt, session);
  r.set_max_new_tokens(7);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_sampling()->set_temperature(0.8f);
  r.mutable_sampling()->set_repetition_penalty(1.3f);  // the token counts must survive too
  std::vector<int32_t> out;
  const absl::Status status = client.Generate(r, [&](const v1::GenerateResponse& m) {
    for (const v1::GeneratedToken& t : m.tokens()) out.push_back(t.id());
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

// Session a takes two turns and the server is SIGKILLed; session b takes the same three turns
// without interruption. After the restart on the same state_dir, a's third turn is b's.
TEST_P(RestartModelsTest, ASessionContinuesAfterASigkillExactlyAsWithoutIt) {
  const std::vector<std::vector<int32_t>> turns = {{1, 2, 3, 4, 5, 6}, {7, 8}, {9}};
  std::string a;
  std::vector<int32_t> uninterrupted;
  {
    std::unique_ptr<ServerProcess> server = Start("log1");
    std::unique_ptr<Client> client = server->Connect();
    a = client->CreateSession()->id();
    const std::string b = client->CreateSession()->id();
    for (uint64_t i = 0; i < 2; ++i) Turn(*client, turns[i], a, i);
    for (uint64_t i = 0; i < 3; ++i) uninterrupted = Turn(*client, turns[i], b, i);
    client.reset();
    server->Signal(SIGKILL);
    server->WaitForExit(absl::Seconds(30));
  }
  std::unique_ptr<ServerProcess> server = Start("log2");
  std::unique_ptr<Client> client = server->Connect();
  EXPECT_EQ(client->GetSession(a)->num_tokens(), 6 + 7 + 2 + 7);
  EXPECT_EQ(Turn(*client, turns[2], a, 2), uninterrupted);
  client.reset();
  server->Signal(SIGTERM);
  EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
}

TEST_F(RestartTest, EverySessionFieldIsKeptAcrossSigtermAndSigkillRestarts) {
  std::map<std::string, v1::Session> before;
  {
    std::unique_ptr<ServerProcess> server = Start("log1");
    std::unique_ptr<Client> client = server->Connect();
    const std::string a = client->CreateSession()->id();
    const std::string b = client->CreateSession()->id();
    ASSERT_TRUE(client->Generate(Tokens({1, 2, 3}, a), [](const auto&) { return true; }).ok());
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(client->Generate(Tokens({4}, b), [](const auto&) { return true; }).ok());
    before = AllSessions(*client);
    ASSERT_EQ(before.size(), 2u);
    absl::SleepFor(absl::Milliseconds(300));  // a restart must not look like a use
    client.reset();  // no open channel for the shutdown to wait on
    server->Signal(SIGTERM);
    EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
    EXPECT_FALSE(std::filesystem::exists(PortFile())) << "removed on a clean exit";
  }
  for (int signal : {SIGKILL, SIGTERM}) {
    std::unique_ptr<ServerProcess> server = Start("log-" + std::to_string(signal));
    std::unique_ptr<Client> client = server->Connect();
    const std::map<std::string, v1::Session> after = AllSessions(*client);
    ASSERT_EQ(after.size(), before.size());
    for (const auto& [id, was] : before) {
      SCOPED_TRACE(id);
      ASSERT_TRUE(after.count(id));
      const v1::Session& now = after.at(id);
      EXPECT_EQ(now.num_tokens(), was.num_tokens());
      EXPECT_EQ(now.busy(), was.busy());
      EXPECT_EQ(now.create_time().seconds(), was.create_time().seconds());
      EXPECT_EQ(now.create_time().nanos(), was.create_time().nanos());
      EXPECT_EQ(now.last_use_time().seconds(), was.last_use_time().seconds());
      EXPECT_EQ(now.last_use_time().nanos(), was.last_use_time().nanos());
      // Restore loads the most recently used sessions into the free slots, as they were.
      EXPECT_EQ(now.residency(), was.residency());
      EXPECT_EQ(now.residency(), v1::Session::RESIDENCY_RESIDENT);
    }
    client.reset();
    server->Signal(signal);
    server->WaitForExit(absl::Seconds(30));
  }
}

TEST_F(RestartTest, SessionsIdlePastTheTimeoutWhileDownAreGoneAtStart) {
  std::string id;
  {
    std::unique_ptr<ServerProcess> server = Start("log1", "2s");
    std::unique_ptr<Client> client = server->Connect();
    id = client->CreateSession()->id();
    client.reset();
    server->Signal(SIGTERM);
    EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
  }
  const std::string file = dir_.Join("state/" + id + ".session");
  ASSERT_TRUE(std::filesystem::exists(file));
  absl::SleepFor(absl::Milliseconds(2500));
  std::unique_ptr<ServerProcess> server = Start("log2", "2s");
  std::unique_ptr<Client> client = server->Connect();
  EXPECT_EQ(client->GetSession(id).status().code(), absl::StatusCode::kNotFound);
  client.reset();
  server->Signal(SIGTERM);
  EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
  EXPECT_FALSE(std::filesystem::exists(file));
}

// Ownership is persisted with the session: after a SIGKILL and restart, each tenant of the
// tokens file still reaches exactly its own sessions, and another tenant's are NOT_FOUND.
TEST_F(RestartTest, SessionsKeepTheirOwnersAcrossACrash) {
  { std::ofstream(dir_.Join("tokens")) << "alice token-of-alice\nbob token-of-bob\n"; }
  const std::vector<std::string> auth = {"--auth_tokens_file=" + dir_.Join("tokens")};
  ClientOptions alice_options, bob_options;
  alice_options.auth_token = "token-of-alice";
  bob_options.auth_token = "token-of-bob";
  std::string a, b;
  int64_t a_tokens = 0;
  {
    std::unique_ptr<ServerProcess> server = Start("log1", "1h", auth);
    std::unique_ptr<Client> alice = server->Connect(alice_options);
    std::unique_ptr<Client> bob = server->Connect(bob_options);
    a = alice->CreateSession()->id();
    b = bob->CreateSession()->id();
    ASSERT_TRUE(alice->Generate(Tokens({1, 2}, a), [](const auto&) { return true; }).ok());
    a_tokens = alice->GetSession(a)->num_tokens();
    ASSERT_GT(a_tokens, 2);
    server->Signal(SIGKILL);
    server->WaitForExit(absl::Seconds(30));
    // Logs name tenants, never tokens.
    EXPECT_NE(server->Log().find("created for tenant alice"), std::string::npos) << server->Log();
    EXPECT_EQ(server->Log().find("token-of-"), std::string::npos) << "a token was logged";
  }
  for (int restart = 0; restart < 2; ++restart) {
    std::unique_ptr<ServerProcess> server = Start("log-" + std::to_string(restart), "1h", auth);
    std::unique_ptr<Client> alice = server->Connect(alice_options);
    std::unique_ptr<Client> bob = server->Connect(bob_options);
    EXPECT_EQ(AllSessions(*alice).size(), 1u);
    EXPECT_EQ(AllSessions(*alice).count(a), 1u);
    EXPECT_EQ(AllSessions(*bob).size(), 1u);
    EXPECT_EQ(AllSessions(*bob).count(b), 1u);
    EXPECT_EQ(alice->GetSession(a)->num_tokens(), a_tokens);
    EXPECT_EQ(bob->GetSession(a).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(alice->ExportSession(b).status().code(), absl::StatusCode::kNotFound);
    alice.reset();
    bob.reset();
    server->Signal(SIGTERM);
    EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
    EXPECT_EQ(server->Log().find("token-of-"), std::string::npos) << "a token was logged";
  }
  // Without authentication every caller is the default tenant, which owns none of them.
  std::unique_ptr<ServerProcess> server = Start("log-open");
  std::unique_ptr<Client> anyone = server->Connect();
  EXPECT_TRUE(AllSessions(*anyone).empty());
  EXPECT_EQ(anyone->GetSession(a).status().code(), absl::StatusCode::kNotFound);
  anyone.reset();
  server->Signal(SIGTERM);
  EXPECT_EQ(server->WaitForExit(absl::Seconds(30)), 0) << server->Log();
}

TEST_F(RestartTest, PortFileIsRemovedOnCleanExitAndReplacedAfterACrash) {
  {
    std::unique_ptr<ServerProcess> server = Start("log1");
    server->Signal(SIGKILL);
    server->WaitForExit(absl::Seconds(30));
  }
  // A crash leaves the file; make it name a port nobody serves, as a stale one would.
  ASSERT_TRUE(std::filesystem::exists(PortFile()));
  { std::ofstream(PortFile(), std::ios::trunc) << "grpc_port=1\nmetrics_port=1\n"; }
  ServerProcess server({"--model=" + dir_.Join("model"), "--host=127.0.0.1", "--port=0",
                        "--metrics_port=0", "--http_port=-1", "--port_file=" + PortFile(),
                        "--threads=1"},
                       dir_.Join("log2"));  // reads the file itself, stale one kept
  // Until the new server has bound its listeners, the file is absent (removed at start) or
  // the stale one (before the process got there); afterwards it names the new server.
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health;
  bool served = false;
  for (int attempt = 0; attempt < 600 && !served; ++attempt) {
    absl::SleepFor(absl::Milliseconds(100));
    std::ifstream in(PortFile());
    std::string line;
    int port = 0;
    while (std::getline(in, line)) {
      if (line.rfind("grpc_port=", 0) == 0) port = std::stoi(line.substr(10));
    }
    if (port <= 1) continue;
    ClientOptions options;
    options.target = "127.0.0.1:" + std::to_string(port);
    std::unique_ptr<Client> client = *Client::Create(options);
    health = client->CheckHealth();
    served = health.ok();
  }
  EXPECT_TRUE(served) << server.Log();
  server.Signal(SIGINT);
  EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 0) << server.Log();
  EXPECT_FALSE(std::filesystem::exists(PortFile()));
}

}  // namespace
}  // namespace linserve
