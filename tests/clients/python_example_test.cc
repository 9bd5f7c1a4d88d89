// client/python/linserve_example.py against a spawned linserve: Debian's python3-grpcio with
// stubs the build generated from proto/.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/clients/tool_server.h"

namespace linserve::testing {
namespace {

using ::testing::HasSubstr;

std::string Describe(const ProcessResult& r) {
  return absl::StrCat("exit ", r.exit_code, "\n--- stdout ---\n", r.out, "\n--- stderr ---\n",
                      r.err);
}

TEST(PythonExampleTest, StreamsAGenerationAndContinuesTheSession) {
  absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--target=" + (*server)->target();
  const ProcessResult r =
      RunPythonExample({target, "--prompt=ROMEO:", "--then=\nJULIET:", "--max-new-tokens=16",
                        "--seed=3", "--temperature=0.8", "--keep"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("model linear_transformer: 25472 parameters"));
  EXPECT_THAT(r.err, HasSubstr("turn 1: FINISH_REASON_LENGTH prompt_tokens=6 "
                               "generated_tokens=16 session_tokens=22 request_id="));
  EXPECT_THAT(r.err, HasSubstr("turn 2: FINISH_REASON_LENGTH prompt_tokens=8 "
                               "generated_tokens=16 session_tokens=46 request_id="));
  const size_t at = r.err.find("\nsession ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string id = r.err.substr(at + 9, 32);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("session ", id, ": 46 tokens")));

  // The session lives on (--keep) with what the example reported, and the C++ CLI, replaying
  // the same two requests on a session of its own, streams the same text.
  auto cli = [&](const std::vector<std::string>& args) {
    std::vector<std::string> all = {target};
    all.insert(all.end(), args.begin(), args.end());
    const ProcessResult c = RunCli(all);
    EXPECT_EQ(c.exit_code, 0) << Describe(c);
    return c.out;
  };
  EXPECT_THAT(cli({"sessions", "get", id}), HasSubstr("tokens: 46\n"));
  const std::string replay(absl::StripAsciiWhitespace(cli({"sessions", "create"})));
  const std::vector<std::string> sampling = {"--seed=3", "--temperature=0.8",
                                             "--max-new-tokens=16", "--session=" + replay};
  std::vector<std::string> first = {"generate", "ROMEO:"};
  first.insert(first.end(), sampling.begin(), sampling.end());
  std::vector<std::string> second = {"generate", "\nJULIET:"};
  second.insert(second.end(), sampling.begin(), sampling.end());
  const std::string turn1 = cli(first);
  const std::string turn2 = cli(second);
  EXPECT_EQ(r.out, absl::StrCat("ROMEO:", turn1, "\n\nJULIET:", turn2, "\n"));

  // Without --keep the example deletes its session.
  const ProcessResult again = RunPythonExample({target, "--max-new-tokens=4"});
  ASSERT_EQ(again.exit_code, 0) << Describe(again);
  const size_t at2 = again.err.find("\nsession ");
  ASSERT_NE(at2, std::string::npos) << again.err;
  const ProcessResult gone =
      RunCli({target, "sessions", "get", again.err.substr(at2 + 9, 32)});
  EXPECT_EQ(gone.exit_code, 5) << Describe(gone);
}

TEST(PythonExampleTest, TlsTokenAndErrors) {
  ScopedTempDir dir;
  std::ofstream(dir.Join("token")) << "py-token\n";
  absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start(
      {"--tls_cert=" + TestData("server.crt"), "--tls_key=" + TestData("server.key"),
       "--auth_token_file=" + dir.Join("token")});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--target=" + (*server)->target();
  const std::string ca = "--ca-cert=" + TestData("ca.crt");

  ProcessResult r = RunPythonExample({target, ca, "--token=py-token", "--max-new-tokens=4"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("turn 2: FINISH_REASON_LENGTH"));

  r = RunPythonExample({target, ca, "--token=wrong", "--max-new-tokens=4"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: UNAUTHENTICATED: "));
  r = RunPythonExample({target, "--token=py-token", "--max-new-tokens=4"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: UNAVAILABLE: "));
}

}  // namespace
}  // namespace linserve::testing
