// Whole-file reads, durable atomic writes and the directory operations a crash-safe store needs,
// with errors that name the path and the OS reason (errno mapped to a status code: ENOSPC ->
// RESOURCE_EXHAUSTED, EACCES -> PERMISSION_DENIED, ENOENT -> NOT_FOUND, EROFS -> ...).
// Used by linserve_model_format and by server/engine's SessionPersister (through its FileSystem).
#ifndef LINSERVE_MODEL_FORMAT_FILE_IO_H_
#define LINSERVE_MODEL_FORMAT_FILE_IO_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linserve {

// The contents of the regular file at `path`. NOT_FOUND when it does not exist,
// FAILED_PRECONDITION when it is not a regular file, other OS errors mapped from errno.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// The same for at most the first `max_bytes` of the file.
absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes);

// Writes `contents` to a temporary file next to `path` ("PATH.tmp.PID"), fsyncs it, renames it
// over `path` and fsyncs the directory, so readers see either the old file or the whole new one,
// and after a crash (power loss included) the new one once this returned OK. On failure the
// temporary file is removed.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Creates or truncates `path`, writes `contents` and fsyncs it (no rename: the caller renames
// and syncs the directory, e.g. once for a batch), created with `mode` (before the umask). On
// failure the file is removed.
absl::Status WriteFileDurably(const std::string& path, std::string_view contents,
                              int mode = 0644);
// rename(2): atomically replaces `to`.
absl::Status RenameFile(const std::string& from, const std::string& to);
// unlink(2); NOT_FOUND when there is no such file.
absl::Status RemoveFile(const std::string& path);
// fsyncs the directory itself, making renames and removals in it durable.
absl::Status SyncDirectory(const std::string& dir);
// Creates `dir` and its missing parents; OK when it exists as a directory.
absl::Status CreateDirectories(const std::string& dir);
// The names (not paths) of the entries in `dir`, without "." and "..", in no particular order.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_FILE_IO_H_
