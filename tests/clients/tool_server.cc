#include "tests/clients/tool_server.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/testing/random_model.h"

namespace linserve::testing {

absl::StatusOr<std::unique_ptr<ToolServer>> ToolServer::Start(
    const std::vector<std::string>& extra_flags, const ModelConfig& config) {
  std::unique_ptr<ToolServer> server(new ToolServer());
  const std::string model = server->dir_.Join("model");
  if (absl::Status s = WriteModelDirectory(model, config, MakeRandomWeights(config, 1)); !s.ok()) {
    return s;
  }
  const std::string port_file = server->dir_.Join("ports");
  std::vector<std::string> args = {"--model=" + model,        "--host=127.0.0.1",
                                   "--port=0",                "--metrics_port=0",
                                   "--http_port=-1",          "--port_file=" + port_file,
                                   "--threads=1",             "--reflection=false",
                                   "--drain_deadline=2s"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  server->process_ =
      std::make_unique<ServerProcess>(args, server->dir_.Join("server.log"), port_file);
  if (!server->process_->spawned() || !server->process_->WaitForPorts(absl::Seconds(60))) {
    return absl::UnavailableError(
        absl::StrCat("linserve did not start; its log:\n", server->process_->Log()));
  }
  return server;
}

std::string ToolServer::target() const {
  return absl::StrCat("127.0.0.1:", process_->grpc_port());
}

ProcessResult RunCli(const std::vector<std::string>& args, const std::string& input,
                     absl::Duration timeout) {
  std::vector<std::string> argv = {LINSERVE_CLI_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, input, timeout);
}

ProcessResult RunLoadtest(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {LINSERVE_LOADTEST_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, "", timeout);
}

ProcessResult RunPythonExample(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {LINSERVE_PYTHON,
                                   LINSERVE_SOURCE_DIR "/client/python/linserve_example.py",
                                   "--stubs=" LINSERVE_PYTHON_STUBS_DIR};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, "", timeout);
}

std::string TestData(const std::string& name) {
  return absl::StrCat(LINSERVE_SOURCE_DIR, "/tests/integration/testdata/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace linserve::testing
