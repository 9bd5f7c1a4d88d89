// RunProcess: runs a client tool to completion for the end-to-end tests, with its stdin fed and
// its stdout and stderr captured.
#ifndef LINSERVE_TESTS_CLIENTS_PROCESS_H_
#define LINSERVE_TESTS_CLIENTS_PROCESS_H_

#include <string>
#include <vector>

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

}  // namespace linserve::testing

#endif  // LINSERVE_TESTS_CLIENTS_PROCESS_H_
