// Whole-file reads and atomic writes with errors that name the path and the OS reason.
// Internal to linserve_model_format (and its test-support library).
#ifndef LINSERVE_MODEL_FILE_IO_H_
#define LINSERVE_MODEL_FILE_IO_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linserve {

// The contents of the regular file at `path`. NOT_FOUND when it does not exist,
// FAILED_PRECONDITION when it is not a regular file, other OS errors mapped from errno.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to a temporary file next to `path`, then renames it over `path`, so readers
// see either the old file or the whole new one.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FILE_IO_H_
