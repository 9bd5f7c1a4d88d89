// Server reflection describes the whole API: tests/clients/reflection_client.py, which has no
// generated stubs of linserve's .proto files, lists the services, resolves LinServe's and
// Health's files through reflection, builds its requests from the returned descriptors alone,
// checks health and streams a Generate from the spawned linserve.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/clients/tool_server.h"

namespace linserve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(ReflectionTest, AClientWithNoStubsCallsGenerateFromReflectedDescriptors) {
  absl::StatusOr<std::unique_ptr<ToolServer>> server = ToolServer::Start({"--reflection=true"});
  ASSERT_TRUE(server.ok()) << server.status();
  const ProcessResult r =
      RunProcess({LINSERVE_PYTHON, LINSERVE_SOURCE_DIR "/tests/clients/reflection_client.py",
                  "--target=" + (*server)->target()},
                 "", absl::Seconds(60));
  ASSERT_EQ(r.exit_code, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
  EXPECT_THAT(r.out, HasSubstr("grpc.health.v1.Health"));
  EXPECT_THAT(r.out, HasSubstr("linserve.v1.LinServe"));
  EXPECT_THAT(r.out, HasSubstr("linserve file: linserve/v1/service.proto\n"));
  EXPECT_THAT(r.out, HasSubstr("GenerateRequest file: linserve/v1/generate.proto\n"));
  EXPECT_THAT(r.out, HasSubstr("health: SERVING\n"));
  EXPECT_THAT(r.out, MatchesRegex("(.|\n)*generated tokens: [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+\n"
                                  "(.|\n)*"));
  EXPECT_THAT(r.out, HasSubstr("finish: FINISH_REASON_LENGTH\n"));
  EXPECT_THAT(r.out, HasSubstr("usage: prompt_tokens=3 generated_tokens=5\n"));
}

}  // namespace
}  // namespace linserve::testing
