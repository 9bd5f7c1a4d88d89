// Sessions through the real stack: fork, export / restart / import, corrupt and foreign
// snapshots, hibernation, listing.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "test_server.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

class SessionsTest : public ::testing::Test {
 protected:
  static TestServerOptions Options() {
    TestServerOptions o;
    o.backend.num_threads = 1;
    return o;
  }
  Model model_ = MakeRandomModel(TinyConfig(), 7);
};

TEST_F(SessionsTest, ForkedBranchesContinueIdenticallyUnderTheSameSeed) {
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

// The ids the client proposes (so a proxy can route a session's first call) are validated and
// taken once; the client library proposes a fresh one for every new session.
TEST_F(SessionsTest, ProposedSessionIdsAreValidatedAndTakenOnce) {
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

TEST_F(SessionsTest, ExportRestartImportContinuesIdentically) {
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

TEST_F(SessionsTest, CorruptOrForeignImportIsRejectedAndChangesNothing) {
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
  const absl::Status oversized =
      server.client().ImportSession(snapshot + std::string(10 << 20, 'x')).status();
  EXPECT_EQ(oversized.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(oversized.message()), HasSubstr("exceeds"));

  const Model other = MakeRandomModel(TinyConfig(), 8);
  TestServer foreign(other, Options());
  const absl::Status wrong_model = foreign.client().ImportSession(snapshot).status();
  EXPECT_EQ(wrong_model.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_model.message()), HasSubstr("model"));

  EXPECT_EQ(server.client().ListSessions(100, "")->sessions_size(), 1);
  EXPECT_EQ(foreign.client().ListSessions(100, "")->sessions_size(), 0);
  EXPECT_EQ(server.client().GetSession(id)->num_tokens(), 6);
}

TEST_F(SessionsTest, HibernationRoundTripGivesIdenticalContinuations) {
  auto run = [&](int32_t slots, int32_t* hibernated) {
    TestServerOptions options = Options();
    options.backend.max_slots = slots;
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
  int32_t hibernated = 0, none = 0;
  const auto with_hibernation = run(2, &hibernated);
  const auto without = run(16, &none);
  EXPECT_EQ(hibernated, 3);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(with_hibernation, without);
}

TEST_F(SessionsTest, ListsEverySessionOncePageByPageAndDeletes) {
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

TEST_F(SessionsTest, StateDirPersistsAcrossAnInProcessRestart) {
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

}  // namespace
}  // namespace linserve
