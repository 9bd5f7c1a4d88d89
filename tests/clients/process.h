// Child processes for the end-to-end tests of the client tools: a program run to completion
// with its output captured, and a long-running one (the server) stopped on destruction.
#ifndef LINSERVE_TESTS_CLIENTS_PROCESS_H_
#define LINSERVE_TESTS_CLIENTS_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace linserve::testing {

struct ProcessResult {
  // The exit status, or 128 + signal number when killed by a signal.
  int exit_code = -1;
  std::string out;
  std::string err;
  // The program outlived its timeout and was killed.
  bool timed_out = false;
};

// Runs argv[0] (a path) with `input` on its stdin, capturing stdout and stderr. Kills it with
// SIGKILL after `timeout`.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& input = "",
                         absl::Duration timeout = absl::Seconds(60));

// A child whose stdout and stderr go to `log_path`. The destructor sends SIGTERM, waits up to
// 10 s, then SIGKILLs.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Running();
  // Sends `signal` and waits up to `timeout` for the exit; returns the exit code as
  // ProcessResult::exit_code, or -1 when it was still running (then it is SIGKILLed).
  int Stop(int signal, absl::Duration timeout);
  pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  int exit_code_ = -1;
  bool reaped_ = false;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
absl::StatusOr<int> PickFreePort();

}  // namespace linserve::testing

#endif  // LINSERVE_TESTS_CLIENTS_PROCESS_H_
