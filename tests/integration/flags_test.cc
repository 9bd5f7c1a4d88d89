// The linserve binary's flags: each reaches the component it configures, and a bad value stops
// the server at start with exit status 1 and a message naming the flag.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return std::string(LINSERVE_SOURCE_DIR) + "/tests/integration/testdata/" + name;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ModelConfig config = TinyConfig();
    ASSERT_TRUE(WriteModelDirectory(model_dir_, config, MakeRandomWeights(config, 2)).ok());
  }
  ScopedTempDir dir_;
  const std::string model_dir_ = dir_.Join("model");
};

TEST_F(FlagsTest, EveryFlagReachesTheServer) {
  { std::ofstream(dir_.Join("token")) << "  flag-token\n"; }
  { std::ofstream(dir_.Join("tokens")) << "alice alice-token\n"; }
  ServerProcess server(
      {"--model=" + model_dir_, "--device=cpu", "--weight_precision=fp32", "--state_precision=fp32",
       "--host=127.0.0.1",
       "--port=0", "--metrics_port=-1", "--http_port=-1", "--port_file=" + dir_.Join("ports"),
       "--tls_cert=" + TestData("server.crt"), "--tls_key=" + TestData("server.key"),
       "--tls_client_ca=" + TestData("ca.crt"), "--auth_token_file=" + dir_.Join("token"),
       "--auth_tokens_file=" + dir_.Join("tokens"),
       "--reflection=false", "--state_dir=" + dir_.Join("state"), "--drain_deadline=1s",
       "--state_memory_mib=1", "--max_slots=5", "--max_batch_size=3",
       "--prefill_token_budget=17", "--prefill_tokens_per_decode_row=0",
       "--idle_prefill_token_budget=19", "--prefill_chunk_size=8", "--threads=1",
       "--max_queue_depth=9", "--max_sessions=11", "--session_idle_timeout=inf",
       "--max_new_tokens=123", "--max_prompt_tokens=456", "--max_stop_strings=2",
       "--max_stop_string_bytes=7", "--max_stop_token_ids=3", "--max_top_logprobs=4",
       "--max_prompt_bytes=5000000", "--prefix_cache_mib=3", "--prefix_checkpoint_interval=64",
       "--prefix_min_tokens=8", "--prefix_disk_dir=" + dir_.Join("prefix"),
       "--prefix_disk_mib=7", "--session_checkpoints=2", "--session_checkpoint_mib=5",
       "--tenant_max_sessions=3", "--tenant_max_queued=4", "--tenant_prefix_cache_mib=2",
       "--tenant_session_checkpoint_mib=4", "--constraint_max_text_bytes=100",
       "--constraint_max_grammar_elements=5000", "--constraint_max_nesting_depth=5",
       "--constraint_max_matcher_stacks=77", "--constraint_cache_entries=3",
       "--constraint_max_cached_masks=99", "--log_level=warn"},
      dir_.Join("log"), dir_.Join("ports"));
  ASSERT_TRUE(server.WaitForPorts(absl::Seconds(60))) << server.Log();
  EXPECT_EQ(server.metrics_port(), -1);
  EXPECT_TRUE(std::filesystem::is_directory(dir_.Join("prefix")));

  ClientOptions options;
  options.tls = true;
  options.tls_server_name = "localhost";
  options.tls_root_certs = Read(TestData("ca.crt"));
  options.tls_client_cert_chain = Read(TestData("client.crt"));
  options.tls_client_key = Read(TestData("client.key"));
  options.timeout = absl::Seconds(10);
  // Under mutual TLS a caller without a token is its certificate's tenant; one with a token
  // must send one of the files'.
  const std::string unowned = server.Connect(options)->CreateSession()->id();
  options.auth_token = "not-a-token";
  EXPECT_EQ(server.Connect(options)->GetModelInfo().status().code(),
            absl::StatusCode::kUnauthenticated);
  options.auth_token = "alice-token";
  EXPECT_TRUE(server.Connect(options)->GetModelInfo().ok());
  EXPECT_EQ(server.Connect(options)->GetSession(unowned).status().code(),
            absl::StatusCode::kNotFound);
  options.auth_token = "flag-token";
  std::unique_ptr<Client> client = server.Connect(options);
  absl::StatusOr<v1::GetModelInfoResponse> info = client->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status() << server.Log();
  EXPECT_EQ(info->device(), "cpu");
  EXPECT_EQ(info->slot_capacity(), 5);
  const v1::ServerLimits& limits = info->limits();
  EXPECT_EQ(limits.max_batch_size(), 3);
  EXPECT_EQ(limits.prefill_token_budget(), 17);
  EXPECT_EQ(limits.prefill_tokens_per_decode_row(), 0);
  EXPECT_EQ(limits.idle_prefill_token_budget(), 19);
  EXPECT_EQ(limits.max_queue_depth(), 9);
  EXPECT_EQ(limits.max_sessions(), 11);
  EXPECT_EQ(limits.max_new_tokens(), 123);
  EXPECT_EQ(limits.max_prompt_tokens(), 456);
  EXPECT_EQ(limits.max_stop_strings(), 2);
  EXPECT_EQ(limits.max_stop_string_bytes(), 7);
  EXPECT_EQ(limits.max_stop_token_ids(), 3);
  EXPECT_EQ(limits.max_top_logprobs(), 4);
  EXPECT_EQ(limits.max_prompt_bytes(), 5000000);
  EXPECT_EQ(limits.constraint_max_text_bytes(), 100);
  EXPECT_EQ(limits.constraint_max_grammar_elements(), 5000);
  EXPECT_EQ(limits.constraint_max_nesting_depth(), 5);
  EXPECT_EQ(limits.constraint_max_matcher_stacks(), 77);
  EXPECT_EQ(limits.constraint_cache_entries(), 3);
  EXPECT_EQ(limits.constraint_max_cached_masks(), 99);
  // gRPC's message limit (4 MiB by default) was raised with it: a 5.5 MB text reaches the
  // server's own check, which names the field and the flag.
  const absl::Status too_long = client->Tokenize(std::string(5500000, 'a')).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument) << too_long;
  EXPECT_THAT(std::string(too_long.message()), HasSubstr("max_prompt_bytes"));
  // --constraint_max_text_bytes=100 reaches the compiler.
  v1::GenerateRequest constrained;
  constrained.set_text("a");
  constrained.mutable_constraint()->set_regex(std::string(101, 'a'));
  const absl::Status too_long_regex =
      client->Generate(constrained, [](const v1::GenerateResponse&) { return true; });
  EXPECT_EQ(too_long_regex.code(), absl::StatusCode::kInvalidArgument) << too_long_regex;
  EXPECT_THAT(std::string(too_long_regex.message()), HasSubstr("constraint.regex: "));
  EXPECT_THAT(std::string(too_long_regex.message()), HasSubstr("max_text_bytes"));
  ASSERT_TRUE(client->CreateSession().ok());
  // --session_checkpoints=2: a session keeps its two newest turn boundaries (and 0).
  const std::string turns = client->CreateSession()->id();
  for (int i = 0; i < 3; ++i) {
    v1::GenerateRequest turn;
    turn.set_session_id(turns);
    turn.mutable_token_ids()->add_ids(65 + i);
    turn.set_max_new_tokens(2);
    ASSERT_TRUE(client->Generate(turn, [](const v1::GenerateResponse&) { return true; }).ok());
  }
  EXPECT_EQ(client->GetSession(turns)->boundaries_size(), 3);
  // --tenant_max_sessions=3: this tenant's third session is its last.
  ASSERT_TRUE(client->CreateSession().ok());
  const absl::Status over_quota = client->CreateSession().status();
  EXPECT_EQ(over_quota.code(), absl::StatusCode::kResourceExhausted) << over_quota;
  EXPECT_THAT(std::string(over_quota.message()), HasSubstr("tenant_max_sessions (3)"));
  // --prefix_min_tokens=8: a resent 9-token prompt (the model has no BOS) starts from the
  // state before its last token.
  v1::GenerateRequest resend;
  for (int i = 0; i < 9; ++i) resend.mutable_token_ids()->add_ids(70 + i);
  resend.set_max_new_tokens(1);
  int32_t cached = -1;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client
                    ->Generate(resend,
                               [&](const v1::GenerateResponse& r) {
                                 if (r.has_usage()) cached = r.usage().cached_prompt_tokens();
                                 return true;
                               })
                    .ok());
  }
  EXPECT_EQ(cached, 8);

  server.Signal(SIGTERM);
  EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 0) << server.Log();
  const std::string log = server.Log();
  EXPECT_THAT(log, Not(HasSubstr("[info]")));  // --log_level=warn
}

// Tenant quotas left at 0 are a fair share: --max_sessions=4 between the two tenants of the
// tokens file is 2 sessions each.
TEST_F(FlagsTest, UnsetTenantQuotasAreAFairShareAmongTheTenantsOfTheTokenFiles) {
  { std::ofstream(dir_.Join("tokens")) << "alice alice-token\nbob bob-token\nbob bob-2\n"; }
  ServerProcess server({"--model=" + model_dir_, "--host=127.0.0.1", "--port=0",
                        "--metrics_port=-1", "--http_port=-1", "--port_file=" + dir_.Join("ports"),
                        "--auth_tokens_file=" + dir_.Join("tokens"), "--threads=1",
                        "--max_sessions=4"},
                       dir_.Join("log"), dir_.Join("ports"));
  ASSERT_TRUE(server.WaitForPorts(absl::Seconds(60))) << server.Log();
  ClientOptions options;
  options.timeout = absl::Seconds(10);
  options.auth_token = "bob-token";
  std::unique_ptr<Client> bob = server.Connect(options);
  options.auth_token = "alice-token";
  std::unique_ptr<Client> alice = server.Connect(options);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(bob->CreateSession().ok());
  const absl::Status refused = bob->CreateSession().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("tenant_max_sessions (2)"));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(alice->CreateSession().ok());
  server.Signal(SIGTERM);
  EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 0) << server.Log();
  EXPECT_THAT(server.Log(), HasSubstr("tenant quotas (2 tenants named by token files"));
}

TEST_F(FlagsTest, BadValuesStopTheServerNamingTheFlag) {
  { std::ofstream(dir_.Join("empty_token")) << " \n"; }
  { std::ofstream(dir_.Join("bad_tokens")) << "# tenants\nalice a-secret\nbob\n"; }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--weight_precision=fp8", "--weight_precision"},
      {"--state_precision=fp16", "--state_precision \"fp16\" is not one of fp32, bf16"},
      {"--device=tpu", "tpu"},
      {"--auth_token_file=" + dir_.Join("missing"), "--auth_token_file"},
      {"--auth_token_file=" + dir_.Join("empty_token"), "holds no token"},
      {"--auth_tokens_file=" + dir_.Join("missing"), "--auth_tokens_file: cannot read"},
      {"--auth_tokens_file=" + dir_.Join("bad_tokens"),
       "--auth_tokens_file: \"" + dir_.Join("bad_tokens") + "\" line 3: expected"},
      {"--log_level=loud", "--log_level"},
      {"--state_memory_mib=0", "--state_memory_mib"},
      {"--prefix_cache_mib=-1", "--prefix_cache_mib must be in [0, 2^30]"},
      {"--prefix_checkpoint_interval=-1", "--prefix_checkpoint_interval must be >= 0"},
      {"--prefix_min_tokens=0", "--prefix_min_tokens must be >= 1"},
      {"--prefix_disk_mib=0", "--prefix_disk_mib must be in [1, 2^30]"},
      {"--prefix_disk_dir=" + dir_.Join("empty_token/prefix"),
       "prefix disk directory " + dir_.Join("empty_token/prefix") + " is unusable"},
      {"--session_checkpoints=-2", "--session_checkpoints must be >= 0"},
      {"--session_checkpoint_mib=-1", "--session_checkpoint_mib must be in [0, 2^30]"},
      {"--max_queue_depth=0", "max_queue_depth"},
      {"--emitter_threads=-1", "emitter_threads must be in [0, 64], got -1"},
      {"--prefill_token_budget=-1", "--prefill_token_budget must be >= 1"},
      {"--prefill_tokens_per_decode_row=-2", "--prefill_tokens_per_decode_row must be >= 0"},
      {"--idle_prefill_token_budget=-1", "--idle_prefill_token_budget must be >= 1"},
      {"--idle_prefill_token_budget=16", "--idle_prefill_token_budget (16) must be >= "
                                         "--prefill_token_budget (32)"},
      {"--max_sessions=0", "max_sessions"},
      {"--tenant_max_sessions=4097",
       "--tenant_max_sessions must be in [0, --max_sessions = 4096] (0: a fair share), got 4097"},
      {"--tenant_max_queued=-1",
       "--tenant_max_queued must be in [0, --max_queue_depth = 256] (0: a fair share), got -1"},
      {"--tenant_prefix_cache_mib=1025",
       "--tenant_prefix_cache_mib must be in [0, --prefix_cache_mib = 1024]"},
      {"--tenant_session_checkpoint_mib=-1",
       "--tenant_session_checkpoint_mib must be in [0, --session_checkpoint_mib = 1024]"},
      {"--max_top_logprobs=0", "max_top_logprobs"},
      {"--constraint_max_text_bytes=0",
       "--constraint_max_text_bytes must be in [1, 16777216], got 0"},
      {"--constraint_max_nesting_depth=1025",
       "--constraint_max_nesting_depth must be in [1, 1024]"},
      {"--constraint_cache_entries=-1", "--constraint_cache_entries must be in [1, 65536]"},
      {"--tls_cert=" + TestData("server.crt"), "tls_cert and tls_key"},
      {"--metrics_port=70000", "--metrics_port"},
      {"--http_port=70000", "--http_port"},
      {"--http_max_connections=0", "--http_max_connections must be in [1, 1048576], got 0"},
      {"--http_request_deadline=500ms", "--http_request_deadline must be in [1s, 1h], got 500ms"},
      {"--port=70000", "--port must be in [0, 65535]"},
      {"--host=256.0.0.1", "cannot serve gRPC"},
  };
  for (const auto& [flag, message] : cases) {
    // Each flag once: the case of --http_port replaces the API's "off".
    ServerProcess server({"--model=" + model_dir_, "--port=0", "--metrics_port=0",
                          flag.starts_with("--http_port") ? flag : "--http_port=-1", flag},
                         dir_.Join("bad.log"));
    ASSERT_TRUE(server.spawned());
    EXPECT_EQ(server.WaitForExit(absl::Seconds(30)), 1) << flag;
    EXPECT_THAT(server.Log(), HasSubstr(message)) << flag;
    std::remove(dir_.Join("bad.log").c_str());
  }
  ServerProcess no_model({"--model=" + dir_.Join("nowhere"), "--port=0"}, dir_.Join("nm.log"));
  EXPECT_EQ(no_model.WaitForExit(absl::Seconds(30)), 1);
  EXPECT_THAT(no_model.Log(), HasSubstr("--model"));
}

}  // namespace
}  // namespace linserve
