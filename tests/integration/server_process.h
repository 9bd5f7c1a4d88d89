// ServerProcess: the real linserve binary run as a child process, for tests of what only a
// process has (flags, signals, exit status).
#ifndef LINSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_
#define LINSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/client.h"

namespace linserve {

// One linserve process (LINSERVE_SERVER_BINARY) with stdout and stderr in a log file. Killed
// on destruction if still running.
class ServerProcess {
 public:
  // `args` exclude the program name; `port_file` is what --port_file names (if anything).
  ServerProcess(const std::vector<std::string>& args, const std::string& log,
                const std::string& port_file = "");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool spawned() const { return spawned_; }
  // The child's process id (for /proc/<pid>/...); -1 when not spawned.
  pid_t pid() const { return pid_; }
  // Waits for --port_file; false on timeout or early exit.
  bool WaitForPorts(absl::Duration timeout);
  // The exit status, or -1 if the process did not exit normally within `timeout`.
  int WaitForExit(absl::Duration timeout);
  void Signal(int signal);
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string Log() const;
  // A client of this process's gRPC port.
  std::unique_ptr<Client> Connect(ClientOptions options = {}) const;

 private:
  const std::string log_;
  const std::string port_file_;
  pid_t pid_ = -1;
  bool spawned_ = false;
  bool exited_ = false;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_INTEGRATION_SERVER_PROCESS_H_
