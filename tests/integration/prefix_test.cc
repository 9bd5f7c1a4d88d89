// Prefix states and exact rewind through the real linserve binary and gRPC (a random model with
// the byte tokenizer, so that it runs under the sanitizers too; CPU):
// a stateless chat that resends its history reads only its new tokens and gets the tokens of a
// server without the cache; RewindSession and ForkSession(num_tokens) return a session exactly
// to a turn boundary; their errors reach the client with their codes. Each test runs on
// TinyConfig's linear-attention model, on TinyBasedConfig's short_conv /
// taylor_linear_attention / sliding_window_attention layers (prompts longer than the window) and
// on TinyGatedDeltaNetConfig's gated_delta_net layers.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PrefixTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const ModelConfig config = GetParam() == "based"             ? TinyBasedConfig()
                               : GetParam() == "gated_delta_net" ? TinyGatedDeltaNetConfig()
                                                                 : TinyConfig();
    ASSERT_TRUE(WriteModelDirectory(model_dir_, config, MakeRandomWeights(config, 4)).ok());
  }

  std::unique_ptr<ServerProcess> Start(const std::string& name,
                                       const std::vector<std::string>& extra) {
    std::vector<std::string> flags = {"--model=" + model_dir_,
                                      "--device=cpu",
                                      "--host=127.0.0.1",
                                      "--port=0",
                                      "--metrics_port=-1",
                                      "--http_port=-1",
                                      "--threads=1",
                                      "--log_level=warn",
                                      // One-token attention chunks: prefill is then bitwise
                                      // decode, so a state from the cache (cut at checkpoints,
                                      // or left by decode steps) and a cold prefill compare
                                      // exactly (crash_test.cc says why).
                                      "--prefill_chunk_size=1",
                                      "--port_file=" + dir_.Join(name + ".ports")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto server = std::make_unique<ServerProcess>(flags, dir_.Join(name + ".log"),
                                                  dir_.Join(name + ".ports"));
    EXPECT_TRUE(server->WaitForPorts(absl::Seconds(60))) << server->Log();
    return server;
  }

  ScopedTempDir dir_;
  const std::string model_dir_ = dir_.Join("model");
};

INSTANTIATE_TEST_SUITE_P(Models, PrefixTest, ::testing::Values("tiny", "based", "gated_delta_net"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

struct Reply {
  std::vector<int32_t> tokens;
  v1::Usage usage;
};

Reply Generate(Client& client, const std::vector<int32_t>& prompt, const std::string& session,
               uint64_t seed, float temperature) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  request.set_session_id(session);
  request.set_max_new_tokens(8);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_seed(seed);
  request.mutable_sampling()->set_temperature(temperature);
  Reply reply;
  const absl::Status status = client.Generate(request, [&](const v1::GenerateResponse& m) {
    for (const v1::GeneratedToken& t : m.tokens()) reply.tokens.push_back(t.id());
    if (m.has_usage()) reply.usage = m.usage();
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  return reply;
}

TEST_P(PrefixTest, AResentChatReadsOnlyItsNewTokensAndMatchesAServerWithoutTheCache) {
  std::unique_ptr<ServerProcess> cached = Start("cached", {"--prefix_checkpoint_interval=64"});
  std::unique_ptr<ServerProcess> plain = Start("plain", {"--prefix_cache_mib=0"});
  std::unique_ptr<Client> a = cached->Connect();
  std::unique_ptr<Client> b = plain->Connect();
  absl::StatusOr<std::vector<int32_t>> system = a->Tokenize(
      "You are a helpful assistant who answers in the words of Shakespeare. Be brief, be "
      "kind, and never break character, whatever the user asks of thee.");
  ASSERT_TRUE(system.ok()) << system.status();
  std::vector<int32_t> history = *system;
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE(turn);
    absl::StatusOr<std::vector<int32_t>> user = a->Tokenize(" What say you of the morrow?");
    ASSERT_TRUE(user.ok());
    history.insert(history.end(), user->begin(), user->end());
    const Reply warm = Generate(*a, history, "", 1, /*temperature=*/0);
    const Reply cold = Generate(*b, history, "", 1, 0);
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_EQ(warm.usage.prompt_tokens(), cold.usage.prompt_tokens());
    EXPECT_EQ(cold.usage.cached_prompt_tokens(), 0);
    if (turn > 0) {
      // All but the new user tokens and the previous reply's last token (sent, never fed).
      EXPECT_EQ(warm.usage.prompt_tokens() - warm.usage.cached_prompt_tokens(),
                static_cast<int32_t>(user->size()) + 1);
    }
    history.insert(history.end(), warm.tokens.begin(), warm.tokens.end());
  }
}

TEST_P(PrefixTest, RewindAndForkReturnExactlyToATurnBoundary) {
  std::unique_ptr<ServerProcess> server = Start("server", {"--session_checkpoints=4"});
  std::unique_ptr<Client> client = server->Connect();
  const std::string id = client->CreateSession()->id();
  Generate(*client, {100, 101, 102}, id, 1, 0.8f);
  const int64_t boundary = client->GetSession(id)->num_tokens();
  const Reply second = Generate(*client, {103, 104}, id, 2, 0.8f);
  const int64_t end = client->GetSession(id)->num_tokens();
  EXPECT_THAT(client->GetSession(id)->boundaries(), ElementsAre(0, boundary, end));

  absl::StatusOr<v1::Session> fork = client->ForkSessionAt(id, boundary);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(fork->num_tokens(), boundary);
  absl::StatusOr<v1::Session> rewound = client->RewindSession(id, boundary);
  ASSERT_TRUE(rewound.ok()) << rewound.status();
  EXPECT_EQ(rewound->num_tokens(), boundary);
  EXPECT_THAT(rewound->boundaries(), ElementsAre(0, boundary));
  EXPECT_EQ(Generate(*client, {103, 104}, id, 2, 0.8f).tokens, second.tokens);
  EXPECT_EQ(Generate(*client, {103, 104}, fork->id(), 2, 0.8f).tokens, second.tokens);

  const absl::Status not_kept = client->RewindSession(id, 1).status();
  EXPECT_EQ(not_kept.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_kept.message()), HasSubstr("num_tokens: 1 is not a kept"));
  EXPECT_EQ(client->RewindSession(std::string(32, 'e'), 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client->RewindSession("not-an-id", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->ForkSessionAt(id, -4).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace linserve
