// Whole-file reads and writes for the commands that move session snapshots; "-" is stdin or
// stdout.
#ifndef LINSERVE_CLIENT_CLI_FILES_H_
#define LINSERVE_CLIENT_CLI_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/command.h"

namespace linserve::cli {

// Errors name the path and the system's reason (NOT_FOUND, PERMISSION_DENIED, ...).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, Io& io);
absl::Status WriteWholeFile(const std::string& path, absl::string_view data, Io& io);

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_FILES_H_
