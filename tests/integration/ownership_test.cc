// Sessions belong to the principal that created them (issue #12): a tenant per bearer token of
// a tokens file, or per mutual-TLS certificate subject. Through the real stack, every RPC on
// another tenant's session answers NOT_FOUND exactly as an unknown id does; lists hold only the
// caller's sessions; imports belong to the importer. Also the tokens file's parsing.
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/transport/auth.h"
#include "test_server.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTestData = std::string(LINSERVE_SOURCE_DIR) + "/tests/integration/testdata/";

std::string ReadTestData(const std::string& name) {
  std::ifstream in(kTestData + name);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A status with every occurrence of `id` replaced, so that answers about two ids compare.
std::pair<absl::StatusCode, std::string> Shape(const absl::Status& status,
                                               const std::string& id) {
  std::string message(status.message());
  for (size_t at = message.find(id); at != std::string::npos; at = message.find(id)) {
    message.replace(at, id.size(), "<id>");
  }
  return {status.code(), message};
}

std::vector<std::string> ListedIds(Client& client) {
  std::vector<std::string> ids;
  std::string token;
  do {
    absl::StatusOr<v1::ListSessionsResponse> page = client.ListSessions(1, token);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    for (const v1::Session& s : page->sessions()) ids.push_back(s.id());
    token = page->next_page_token();
  } while (!token.empty());
  return ids;
}

class OwnershipTest : public ::testing::Test {
 protected:
  static TestServerOptions Options() {
    TestServerOptions o;
    o.backend.num_threads = 1;
    return o;
  }

  // `owner` (one tenant's client) holds session `theirs`; `intruder` (another tenant's) tries
  // every RPC on it and on an unknown id, and must not tell them apart. Then the session must
  // be as before and still usable by its owner.
  static void ExpectUnreachable(Client& owner, Client& intruder, const std::string& theirs) {
    const absl::StatusOr<v1::Session> before = owner.GetSession(theirs);
    ASSERT_TRUE(before.ok()) << before.status();
    const std::string unknown(32, 'e');
    const std::vector<std::pair<std::string, std::function<absl::Status(const std::string&)>>>
        rpcs = {
            {"GetSession", [&](const std::string& id) { return intruder.GetSession(id).status(); }},
            {"ForkSession",
             [&](const std::string& id) { return intruder.ForkSession(id).status(); }},
            {"ForkSession(num_tokens)",
             [&](const std::string& id) { return intruder.ForkSessionAt(id, 0).status(); }},
            {"RewindSession",
             [&](const std::string& id) { return intruder.RewindSession(id, 0).status(); }},
            {"DeleteSession", [&](const std::string& id) { return intruder.DeleteSession(id); }},
            {"ExportSession",
             [&](const std::string& id) { return intruder.ExportSession(id).status(); }},
            {"Generate",
             [&](const std::string& id) {
               return RunGenerate(intruder, TokensRequest({3, 4}, 4, 1, id)).status;
             }},
        };
    for (const auto& [rpc, call] : rpcs) {
      const absl::Status on_theirs = call(theirs);
      EXPECT_EQ(on_theirs.code(), absl::StatusCode::kNotFound) << rpc << ": " << on_theirs;
      EXPECT_EQ(Shape(on_theirs, theirs), Shape(call(unknown), unknown)) << rpc;
    }
    EXPECT_THAT(ListedIds(intruder), Not(::testing::Contains(theirs)));

    const absl::StatusOr<v1::Session> after = owner.GetSession(theirs);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->SerializeAsString(), before->SerializeAsString());
    EXPECT_TRUE(RunGenerate(owner, TokensRequest({5}, 3, 2, theirs)).status.ok());
  }

  Model model_ = MakeRandomModel(TinyConfig(), 7);
};

TEST_F(OwnershipTest, TenantsOfATokensFileReachOnlyTheirOwnSessionsThroughEveryRpc) {
  TestServerOptions options = Options();
  options.auth.tenant_tokens = {{"alice", "token-of-alice"}, {"bob", "token-of-bob"}};
  options.client.auth_token = "token-of-alice";
  TestServer server(model_, options);
  Client& alice = server.client();
  ClientOptions bob_options;
  bob_options.auth_token = "token-of-bob";
  std::unique_ptr<Client> bob = server.NewClient(bob_options);

  const std::string a = alice.CreateSession()->id();
  ASSERT_TRUE(RunGenerate(alice, TokensRequest({9, 9, 8}, 6, 1, a)).status.ok());
  const std::string a_fork = alice.ForkSession(a)->id();
  ExpectUnreachable(alice, *bob, a);
  ExpectUnreachable(alice, *bob, a_fork);

  // Lists hold only the caller's sessions, page by page.
  const std::string b = bob->CreateSession()->id();
  EXPECT_THAT(ListedIds(*bob), ::testing::ElementsAre(b));
  EXPECT_THAT(ListedIds(alice), ::testing::UnorderedElementsAre(a, a_fork));
  ExpectUnreachable(*bob, alice, b);

  // Bob importing alice's export owns the copy; alice does not see it.
  absl::StatusOr<std::string> snapshot = alice.ExportSession(a);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  absl::StatusOr<v1::Session> copy = bob->ImportSession(*snapshot);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->num_tokens(), alice.GetSession(a)->num_tokens());
  EXPECT_THAT(ListedIds(*bob), ::testing::UnorderedElementsAre(b, copy->id()));
  ExpectUnreachable(*bob, alice, copy->id());
  // The copy continues exactly as the original would.
  const Streamed from_copy = RunGenerate(*bob, TokensRequest({7}, 8, 5, copy->id()));
  const Streamed from_original = RunGenerate(alice, TokensRequest({7}, 8, 5, a));
  ASSERT_TRUE(from_copy.status.ok() && from_original.status.ok());
  EXPECT_EQ(from_copy.tokens, from_original.tokens);

  // A wrong or missing token is refused, not mapped to some tenant.
  ClientOptions wrong;
  wrong.auth_token = "token-of-carol";
  EXPECT_EQ(server.NewClient(wrong)->ListSessions(10, "").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(server.NewClient({})->GetSession(a).status().code(),
            absl::StatusCode::kUnauthenticated);
}

// Quotas over gRPC: bob at his tenant_max_sessions is refused with RESOURCE_EXHAUSTED naming
// the quota, for creates, forks and imports alike; alice's sessions and her own quota are
// untouched.
TEST_F(OwnershipTest, ATenantAtItsSessionQuotaLeavesTheOtherTenantsSessionsUntouched) {
  TestServerOptions options = Options();
  options.auth.tenant_tokens = {{"alice", "token-of-alice"}, {"bob", "token-of-bob"}};
  options.client.auth_token = "token-of-alice";
  options.engine.sessions.max_sessions = 4;
  options.engine.sessions.tenant_max_sessions = 2;
  TestServer server(model_, options);
  Client& alice = server.client();
  ClientOptions bob_options;
  bob_options.auth_token = "token-of-bob";
  std::unique_ptr<Client> bob = server.NewClient(bob_options);

  const std::string a = alice.CreateSession()->id();
  ASSERT_TRUE(RunGenerate(alice, TokensRequest({9, 9, 8}, 6, 1, a)).status.ok());
  const std::string b = bob->CreateSession()->id();
  ASSERT_TRUE(bob->CreateSession().ok());
  absl::StatusOr<std::string> snapshot = bob->ExportSession(b);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  for (const absl::Status& refused :
       {bob->CreateSession().status(), bob->ForkSession(b).status(),
        bob->ImportSession(*snapshot).status()}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("tenant_max_sessions (2)"));
  }
  const std::string a_fork = alice.ForkSession(a)->id();
  EXPECT_THAT(ListedIds(alice), ::testing::UnorderedElementsAre(a, a_fork));
  EXPECT_TRUE(RunGenerate(alice, TokensRequest({5}, 3, 2, a)).status.ok());
  // Deleting one of bob's makes room for bob again.
  ASSERT_TRUE(bob->DeleteSession(b).ok());
  EXPECT_TRUE(bob->ImportSession(*snapshot).ok());
}

TEST_F(OwnershipTest, TheSingleTokenOfAuthTokenFileIsADefaultTenantBesideNamedOnes) {
  TestServerOptions options = Options();
  options.auth.auth_token = "the-old-token";
  options.auth.tenant_tokens = {{"alice", "token-of-alice"}};
  options.client.auth_token = "the-old-token";
  TestServer server(model_, options);
  ClientOptions alice_options;
  alice_options.auth_token = "token-of-alice";
  std::unique_ptr<Client> alice = server.NewClient(alice_options);
  const std::string old = server.client().CreateSession()->id();
  ExpectUnreachable(server.client(), *alice, old);
  const std::string hers = alice->CreateSession()->id();
  ExpectUnreachable(*alice, server.client(), hers);
}

TEST_F(OwnershipTest, MutualTlsCertificateSubjectsArePrincipals) {
  ScopedTempDir dir;
  const std::string both_cas = dir.Join("client_cas.crt");
  { std::ofstream(both_cas) << ReadTestData("ca.crt") << ReadTestData("other_ca.crt"); }
  TestServerOptions options = Options();
  options.grpc.tls_cert_file = kTestData + "server.crt";
  options.grpc.tls_key_file = kTestData + "server.key";
  options.grpc.tls_client_ca_file = both_cas;
  // A token, when sent, names the caller whatever its certificate.
  options.auth.tenant_tokens = {{"carol", "token-of-carol"}};
  options.client.tls = true;
  options.client.tls_root_certs = ReadTestData("ca.crt");
  options.client.tls_client_cert_chain = ReadTestData("client.crt");
  options.client.tls_client_key = ReadTestData("client.key");
  TestServer server(model_, options);
  Client& client = server.client();  // "CN=linserve test client"

  ClientOptions other_options = options.client;
  other_options.tls_client_cert_chain = ReadTestData("other_client.crt");
  other_options.tls_client_key = ReadTestData("other_client.key");
  std::unique_ptr<Client> other = server.NewClient(other_options);
  ClientOptions carol_options = options.client;  // the first certificate, plus a token
  carol_options.auth_token = "token-of-carol";
  std::unique_ptr<Client> carol = server.NewClient(carol_options);

  const std::string mine = client.CreateSession()->id();
  ASSERT_TRUE(RunGenerate(client, TokensRequest({1, 2}, 4, 1, mine)).status.ok());
  ExpectUnreachable(client, *other, mine);
  ExpectUnreachable(client, *carol, mine);
  const std::string others = other->CreateSession()->id();
  ExpectUnreachable(*other, client, others);
  EXPECT_THAT(ListedIds(client), ::testing::ElementsAre(mine));
  EXPECT_THAT(ListedIds(*other), ::testing::ElementsAre(others));
  EXPECT_TRUE(ListedIds(*carol).empty());

  // A second connection with the same certificate is the same principal.
  std::unique_ptr<Client> again = server.NewClient(options.client);
  EXPECT_TRUE(again->GetSession(mine).ok());
  // A wrong token is refused even with a valid certificate.
  ClientOptions wrong = options.client;
  wrong.auth_token = "not-a-token";
  EXPECT_EQ(server.NewClient(wrong)->GetSession(mine).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(OwnershipTest, WithoutAuthenticationEveryCallerIsOneTenant) {
  TestServer server(model_, Options());
  std::unique_ptr<Client> second = server.NewClient({});
  const std::string id = server.client().CreateSession()->id();
  EXPECT_TRUE(second->GetSession(id).ok());
  EXPECT_THAT(ListedIds(*second), ::testing::ElementsAre(id));
}

TEST(TenantTokensTest, ParsesTenantTokenLinesSkippingBlanksAndComments) {
  absl::StatusOr<std::vector<TenantToken>> tokens = ParseTenantTokens(
      "# tenants\n\nalice  a-secret\r\n\tbob\tb.secret \nalice rotated~token\n", "t.txt");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].tenant, "alice");
  EXPECT_EQ((*tokens)[0].token, "a-secret");
  EXPECT_EQ((*tokens)[1].tenant, "bob");
  EXPECT_EQ((*tokens)[1].token, "b.secret");
  EXPECT_EQ((*tokens)[2].tenant, "alice");
  EXPECT_EQ((*tokens)[2].token, "rotated~token");
}

TEST(TenantTokensTest, ErrorsNameTheFileAndLineAndNeverQuoteAToken) {
  const std::string long_name(kMaxTenantNameBytes + 1, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"alice secret-1\njust-one-field-secret\n", "\"t.txt\" line 2: expected"},
      {"alice secret-1 extra-secret\n", "\"t.txt\" line 1: expected \"<tenant> <token>\""},
      {"# c\nal=ice secret-1\n", "\"t.txt\" line 2: the tenant name"},
      {long_name + " secret-1\n", "line 1: the tenant name"},
      {"alice secret-1\nbob secret-1\n", "\"t.txt\" line 2: the same token as line 1"},
      {"alice secr\x01t-1\n", "line 1: the token (second field)"},
      {"alice secr\xc3\xa9t-1\n", "line 1: the token (second field)"},
      {"# only comments\n\n", "\"t.txt\" holds no"},
      {"", "\"t.txt\" holds no"},
  };
  for (const auto& [contents, expected] : cases) {
    const absl::Status status = ParseTenantTokens(contents, "t.txt").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << contents;
    EXPECT_THAT(std::string(status.message()), HasSubstr(expected)) << contents;
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("secr"))) << contents;
  }
  const absl::Status missing = ReadTenantTokensFile("/nonexistent/tokens").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("cannot read \"/nonexistent/tokens\""));
}

TEST_F(OwnershipTest, TheSameTokenForTwoTenantsFailsTheStart) {
  AuthOptions options;
  options.auth_token = "shared";
  options.tenant_tokens = {{"alice", "shared"}};
  const absl::Status status = Authenticator::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("a token appears twice"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("shared")));
}

}  // namespace
}  // namespace linserve
