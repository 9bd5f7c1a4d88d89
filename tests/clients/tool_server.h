// ToolServer: the real linserve binary serving a tiny random model on 127.0.0.1 (ports chosen
// by the server, so parallel tests never collide), for end-to-end tests of the client tools,
// which run as child processes too.
#ifndef LINSERVE_TESTS_CLIENTS_TOOL_SERVER_H_
#define LINSERVE_TESTS_CLIENTS_TOOL_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/format/config.h"
#include "tests/clients/process.h"
#include "tests/integration/server_process.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve::testing {

class ToolServer {
 public:
  // Writes `config` (default TinyConfig()) with MakeRandomWeights(seed 1) to a temporary
  // directory and starts linserve on it with `extra_flags` added. Errors carry the server's log.
  static absl::StatusOr<std::unique_ptr<ToolServer>> Start(
      const std::vector<std::string>& extra_flags = {}, const ModelConfig& config = TinyConfig());

  // "127.0.0.1:PORT".
  std::string target() const;
  int metrics_port() const { return process_->metrics_port(); }
  // A directory for the test's files, removed with the server.
  const ScopedTempDir& dir() const { return dir_; }
  std::string Log() const { return process_->Log(); }

 private:
  ToolServer() = default;
  ScopedTempDir dir_;
  std::unique_ptr<ServerProcess> process_;
};

// Runs linserve-cli / linserve-loadtest / the Python example with `args`.
ProcessResult RunCli(const std::vector<std::string>& args, const std::string& input = "",
                     absl::Duration timeout = absl::Seconds(60));
ProcessResult RunLoadtest(const std::vector<std::string>& args,
                          absl::Duration timeout = absl::Seconds(120));
ProcessResult RunPythonExample(const std::vector<std::string>& args,
                               absl::Duration timeout = absl::Seconds(120));

// A file of tests/integration/testdata (the test TLS material).
std::string TestData(const std::string& name);

// The contents of a file ("" when it cannot be read).
std::string ReadFile(const std::string& path);

}  // namespace linserve::testing

#endif  // LINSERVE_TESTS_CLIENTS_TOOL_SERVER_H_
