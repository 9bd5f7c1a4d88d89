// Sessions through the real stack: fork, export / restart / import, corrupt and foreign
// snapshots, hibernation, listing. Every test runs on two random models: TinyConfig's
// linear-attention blocks, TinyBasedConfig's mix of short_conv, taylor_linear_attention and
// sliding_window_attention layers (whose ring every prompt here wraps) and
// TinyGatedDeltaNetConfig's delta-rule layers, so that every session feature is checked on each
// kind of state.
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/sessions/snapshot.h"
#include "test_server.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

class SessionsTest : public ::testing::TestWithParam<std::string> {
 protected:
  static TestServerOptions Options() {
    TestServerOptions o;
    o.backend.num_threads = 1;
    // One-token attention chunks: the CPU's prefill is then bitwise its decode steps
    // (kernels/cpu/linear_attention.h), so paths that feed the same tokens in different pieces
    // (turns, forks, choices, a whole history) compare exactly, not up to rounding that a
    // sampled draw can turn into another token.
    o.backend.prefill_chunk_size = 1;
    return o;
  }
  static ModelConfig Config() {
    if (GetParam() == "based") return TinyBasedConfig();
    if (GetParam() == "gated_delta_net") return TinyGatedDeltaNetConfig();
    return TinyConfig();
  }
  Model model_ = MakeRandomModel(Config(), 7);
};

INSTANTIATE_TEST_SUITE_P(Models, SessionsTest,
                         ::testing::Values("tiny", "based", "gated_delta_net"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_P(SessionsTest, ForkedBranchesContinueIdenticallyUnderTheSameSeed) {
  TestServer server(model_, Options());
  const std::string a = server.client().CreateSession()->id();
  ASSERT_TRUE(RunGenerate(server.client(), TokensRequest({9, 9, 8}, 20, 1, a)).status.ok());
  absl::StatusOr<v1::Session> b = server.client().ForkSession(a);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->id(), a);
  EXPECT_EQ(b->num_tokens(), 23);
  const Streamed from_a = RunGenerate(server.client(), TokensRequest({4}, 30, 99, a));
  const Streamed from_b = RunGenerate(server.client(), TokensRequest({4}, 30, 99, b->id()));
  ASSERT_TRUE(from_a.status.ok() && from_b.status.ok());
  EXPECT_EQ(from_a.tokens, from_b.tokens);
  // The branches are independent: a different seed on one does not affect the other.
  const Streamed a2 = RunGenerate(server.client(), TokensRequest({5}, 10, 1, a));
  const Streamed b2 = RunGenerate(server.client(), TokensRequest({5}, 10, 2, b->id()));
  EXPECT_NE(a2.tokens, b2.tokens);
}

// Each branch of a fork made mid-conversation continues exactly as a fresh session fed the
// branch's whole text at once, on a server without prefix states, under the same seed.
TEST_P(SessionsTest, ForkedBranchesContinueAsAColdRunOfTheirWholeText) {
  TestServer server(model_, Options());
  TestServerOptions cold_options = Options();
  cold_options.engine.prefix.memory_budget_bytes = 0;
  TestServer cold_server(model_, cold_options);
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111, 44, 32, 119};
  const std::string a = server.client().CreateSession()->id();
  const Streamed first = RunGenerate(server.client(), TokensRequest(prompt, 6, 3, a));
  ASSERT_TRUE(first.status.ok()) << first.status;
  const std::string b = server.client().ForkSession(a)->id();
  const std::vector<int32_t> to_a = {33, 10, 65}, to_b = {63, 32};
  const Streamed from_a = RunGenerate(server.client(), TokensRequest(to_a, 12, 5, a));
  const Streamed from_b = RunGenerate(server.client(), TokensRequest(to_b, 12, 6, b));
  ASSERT_TRUE(from_a.status.ok() && from_b.status.ok());
  EXPECT_NE(from_a.tokens, from_b.tokens);
  const std::vector<int32_t> history = Concat(prompt, first.tokens);
  for (const auto& [branch, turn, seed] :
       {std::tuple{&from_a, &to_a, 5}, std::tuple{&from_b, &to_b, 6}}) {
    const std::string cold_session = cold_server.client().CreateSession()->id();
    const Streamed cold = RunGenerate(
        cold_server.client(), TokensRequest(Concat(history, *turn), 12, seed, cold_session));
    ASSERT_TRUE(cold.status.ok()) << cold.status;
    EXPECT_EQ(branch->tokens, cold.tokens);
  }
}

// The ids the client proposes (so a proxy can route a session's first call) are validated and
// taken once; the client library proposes a fresh one for every new session.
TEST_P(SessionsTest, ProposedSessionIdsAreValidatedAndTakenOnce) {
  TestServer server(model_, Options());
  auto stub = v1::LinServe::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", server.port()),
                                                        grpc::InsecureChannelCredentials()));
  auto create = [&](const std::string& id, v1::Session* out) {
    grpc::ClientContext context;
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    return stub->CreateSession(&context, request, out);
  };
  v1::Session session;
  const std::string id(32, 'e');
  ASSERT_TRUE(create(id, &session).ok());
  EXPECT_EQ(session.id(), id);
  EXPECT_EQ(create(id, &session).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  std::string upper_case(32, 'e');
  upper_case[0] = 'E';
  for (const std::string& bad : {upper_case, std::string(31, 'e'), std::string("x")}) {
    const grpc::Status status = create(bad, &session);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(status.error_message(), HasSubstr("session_id"));
  }
  ASSERT_TRUE(create("", &session).ok());  // the server picks one
  EXPECT_EQ(session.id().size(), 32u);

  // Import: only the first chunk may propose an id.
  const std::string snapshot = *server.client().ExportSession(id);
  grpc::ClientContext context;
  v1::Session imported;
  auto writer = stub->ImportSession(&context, &imported);
  v1::ImportSessionChunk chunk;
  chunk.set_data(snapshot.substr(0, 10));
  writer->Write(chunk);
  chunk.set_data(snapshot.substr(10));
  chunk.set_session_id(std::string(32, 'f'));
  writer->Write(chunk);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const std::string a = server.client().CreateSession()->id();
  const std::string b = server.client().ImportSession(snapshot)->id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(server.client().GetSession(b)->num_tokens(), 0);
}

TEST_P(SessionsTest, ExportRestartImportContinuesIdentically) {
  TestServerOptions options = Options();
  options.grpc.export_chunk_bytes = 1000;  // many chunks each way
  std::string snapshot;
  Streamed expected;
  {
    TestServer first(model_, options);
    const std::string id = first.client().CreateSession()->id();
    ASSERT_TRUE(RunGenerate(first.client(), TokensRequest({1, 2, 3, 4}, 25, 5, id)).status.ok());
    absl::StatusOr<std::string> exported = first.client().ExportSession(id);
    ASSERT_TRUE(exported.ok()) << exported.status();
    snapshot = *exported;
    EXPECT_GT(snapshot.size(), 2000u);  // three chunks or more
    expected = RunGenerate(first.client(), TokensRequest({6, 7}, 25, 11, id));
    ASSERT_TRUE(expected.status.ok());
  }
  TestServer second(model_, options);
  absl::StatusOr<v1::Session> imported =
      second.client().ImportSession(snapshot, {}, /*chunk_bytes=*/777);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->num_tokens(), 4 + 25);
  EXPECT_EQ(imported->residency(), v1::Session::RESIDENCY_HIBERNATED);
  const Streamed continued =
      RunGenerate(second.client(), TokensRequest({6, 7}, 25, 11, imported->id()));
  ASSERT_TRUE(continued.status.ok());
  EXPECT_EQ(continued.tokens, expected.tokens);
}

TEST_P(SessionsTest, CorruptOrForeignImportIsRejectedAndChangesNothing) {
  TestServer server(model_, Options());
  const std::string id = server.client().CreateSession()->id();
  ASSERT_TRUE(RunGenerate(server.client(), TokensRequest({3}, 5, 1, id)).status.ok());
  const std::string snapshot = *server.client().ExportSession(id);

  std::string flipped = snapshot;
  flipped[flipped.size() / 3] ^= 0x04;
  const absl::Status corrupt = server.client().ImportSession(flipped).status();
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(corrupt.message()), HasSubstr("checksum"));
  EXPECT_EQ(server.client().ImportSession(snapshot.substr(0, snapshot.size() - 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.client().ImportSession("").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Past MaxSnapshotBytes, whose bound includes a constraint's text and matcher at their largest.
  const absl::Status oversized =
      server.client()
          .ImportSession(snapshot + std::string(kMaxSnapshotConstraintTextBytes +
                                                    kMaxSnapshotMatcherBytes + (10 << 20),
                                                'x'))
          .status();
  EXPECT_EQ(oversized.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(oversized.message()), HasSubstr("exceeds"));

  const Model other = MakeRandomModel(Config(), 8);
  TestServer foreign(other, Options());
  const absl::Status wrong_model = foreign.client().ImportSession(snapshot).status();
  EXPECT_EQ(wrong_model.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_model.message()), HasSubstr("model"));

  EXPECT_EQ(server.client().ListSessions(100, "")->sessions_size(), 1);
  EXPECT_EQ(foreign.client().ListSessions(100, "")->sessions_size(), 0);
  EXPECT_EQ(server.client().GetSession(id)->num_tokens(), 6);
}

// Sessions moved out of their slot to host memory, or to disk, and back continue exactly as
// sessions that never left their slot.
TEST_P(SessionsTest, HibernationRoundTripGivesIdenticalContinuations) {
  ScopedTempDir dir;
  auto run = [&](int32_t slots, bool to_disk, int32_t* hibernated) {
    TestServerOptions options = Options();
    options.backend.max_slots = slots;
    if (to_disk) {
      options.engine.state_dir = dir.Join("state");
      options.engine.sessions.host_state_memory_mib = 0;  // out of a slot means on disk
    }
    TestServer server(model_, options);
    std::vector<std::string> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(server.client().CreateSession()->id());
    std::vector<std::vector<int32_t>> out(5);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 5; ++i) {
        const Streamed s = RunGenerate(
            server.client(), TokensRequest({40 + i, round}, 8, 10 * round + i, ids[i]));
        EXPECT_TRUE(s.status.ok()) << s.status;
        out[i].insert(out[i].end(), s.tokens.begin(), s.tokens.end());
      }
    }
    *hibernated = server.client().GetModelInfo()->load().hibernated_sessions();
    return out;
  };
  int32_t hibernated = 0, on_disk = 0, none = 0;
  const auto with_hibernation = run(2, false, &hibernated);
  const auto with_disk = run(1, true, &on_disk);
  const auto without = run(16, false, &none);
  EXPECT_EQ(hibernated, 3);
  EXPECT_EQ(on_disk, 4);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(with_hibernation, without);
  EXPECT_EQ(with_disk, without);
}

TEST_P(SessionsTest, ListsEverySessionOncePageByPageAndDeletes) {
  TestServer server(model_, Options());
  std::set<std::string> created;
  for (int i = 0; i < 7; ++i) created.insert(server.client().CreateSession()->id());
  std::set<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<v1::ListSessionsResponse> page = server.client().ListSessions(3, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const v1::Session& s : page->sessions()) EXPECT_TRUE(listed.insert(s.id()).second);
    token = page->next_page_token();
    ++pages;
  } while (!token.empty());
  EXPECT_EQ(listed, created);
  EXPECT_EQ(pages, 3);

  const std::string victim = *created.begin();
  EXPECT_TRUE(server.client().DeleteSession(victim).ok());
  EXPECT_EQ(server.client().GetSession(victim).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server.client().DeleteSession(victim).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server.client().ListSessions(0, "")->sessions_size(), 6);
}

TEST_P(SessionsTest, StateDirPersistsAcrossAnInProcessRestart) {
  ScopedTempDir dir;
  TestServerOptions options = Options();
  options.engine.state_dir = dir.Join("sessions");
  std::string id;
  Streamed expected;
  {
    TestServer first(model_, options);
    id = first.client().CreateSession()->id();
    ASSERT_TRUE(RunGenerate(first.client(), TokensRequest({8, 8}, 12, 1, id)).status.ok());
    const std::string fork = first.client().ForkSession(id)->id();
    expected = RunGenerate(first.client(), TokensRequest({2}, 12, 4, fork));
    ASSERT_TRUE(first.client().DeleteSession(fork).ok());
    first.Stop();
  }
  TestServer second(model_, options);
  EXPECT_EQ(second.client().ListSessions(0, "")->sessions_size(), 1);
  EXPECT_EQ(second.client().GetSession(id)->num_tokens(), 14);
  EXPECT_EQ(RunGenerate(second.client(), TokensRequest({2}, 12, 4, id)).tokens, expected.tokens);
}

// An imported Based state whose ring counter or values are out of range is refused with
// INVALID_ARGUMENT naming the layer and the field, and adds no session; the intact snapshot,
// re-encoded the same way, is accepted (so the edit, not the re-encoding, is what is refused).
TEST(BasedSessionsTest, ImportOfACorruptRingCounterOrNaNIsRefusedNamingLayerAndField) {
  const Model model = MakeRandomModel(TinyBasedConfig(), 7);
  TestServerOptions options;
  options.backend.num_threads = 1;
  TestServer server(model, options);
  const std::string id = server.client().CreateSession()->id();
  ASSERT_TRUE(RunGenerate(server.client(), TokensRequest({3, 1, 4, 1, 5}, 9, 2, id)).status.ok());
  const std::string exported = *server.client().ExportSession(id);
  absl::StatusOr<SessionSnapshot> decoded = DecodeSnapshot(
      exported, model.config, model.fingerprint, std::numeric_limits<int32_t>::max());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const std::vector<int64_t> offsets = model.config.StateOffsets();
  // Layer 2 (sliding_window_attention, 4 heads × 8, window 4): a ring of 3 entries of 4·2·8
  // floats, then count and next; the 13 tokens seen have filled it.
  const int64_t count = offsets[2] + 3 * 4 * 2 * 8;
  ASSERT_EQ(decoded->state.state[static_cast<size_t>(count)], 3.0f);
  struct Case {
    int64_t index;
    float value;
    std::string names;
  };
  const std::vector<Case> cases = {
      {count, 2.5f, "(layer 2, count)"},
      {count + 1, 3.0f, "(layer 2, next)"},
      {count, -1.0f, "(layer 2, count)"},
      {offsets[2] + 8, std::numeric_limits<float>::quiet_NaN(), "(layer 2, ring 0, head 0, v[0])"},
      {offsets[1] + 16, std::numeric_limits<float>::quiet_NaN(), "(layer 1, head 0, S[1][0])"},
      {offsets[0], std::numeric_limits<float>::infinity(), "(layer 0, "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.names);
    SessionSnapshot bad = *decoded;
    bad.state.state[static_cast<size_t>(c.index)] = c.value;
    const absl::Status status =
        server.client().ImportSession(EncodeSnapshot(bad, model.fingerprint)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.names));
  }
  EXPECT_EQ(server.client().ListSessions(100, "")->sessions_size(), 1);
  EXPECT_TRUE(server.client().ImportSession(EncodeSnapshot(*decoded, model.fingerprint)).ok());
}

// GetModelInfo names every layer's kinds and the bytes of each layer's state slice, computed
// here from the layout of docs/architecture.md §4.7.
TEST(BasedSessionsTest, ModelInfoListsTheKindsAndTheStateBytes) {
  const Model model = MakeRandomModel(TinyBasedConfig(), 7);
  TestServerOptions options;
  options.backend.num_threads = 1;
  TestServer server(model, options);
  absl::StatusOr<v1::GetModelInfoResponse> info = server.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const int64_t conv = 2 * 32 * 4;                      // (kernel − 1) × d_inner
  const int64_t taylor = 2 * (21 * 16 + 21) * 4;        // heads × (F × head_dim + F), F = 21
  const int64_t window = (3 * 4 * 2 * 8 + 2) * 4;       // ring × heads × (k, v) + 2 counters
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"short_conv", conv}, {"taylor_linear_attention", taylor},
      {"sliding_window_attention", window}, {"short_conv", conv}};
  ASSERT_EQ(info->model().layers_size(), 4);
  for (int l = 0; l < 4; ++l) {
    const v1::LayerInfo& layer = info->model().layers(l);
    EXPECT_EQ(layer.mixer().kind(), expected[l].first) << l;
    EXPECT_EQ(layer.norm().kind(), "rms_norm") << l;
    EXPECT_EQ(layer.mlp().kind(), "gated_mlp") << l;
    EXPECT_EQ(layer.state_bytes(), expected[l].second) << l;
  }
  EXPECT_EQ(info->state_bytes_per_session(), 2 * conv + taylor + window);
  EXPECT_EQ(info->model().n_heads(), 0);  // not a single-block model
}

}  // namespace
}  // namespace linserve
