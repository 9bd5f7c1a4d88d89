// FileSystem: the file operations the SessionPersister uses, behind an interface so tests can
// inject faults (a full disk at the Nth write, a failing rename) the way LevelDB's Env does.
//
// The default implementation is model/format/file_io's POSIX calls. Implementations must be
// thread-safe; errors name the path and carry the OS reason (file_io.h).
#ifndef LINSERVE_SERVER_STORAGE_FILE_SYSTEM_H_
#define LINSERVE_SERVER_STORAGE_FILE_SYSTEM_H_

#include <cstdint>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linserve {

// One version of a file: replacing it (a rename over it) or rewriting it changes the triple.
struct FileVersion {
  uint64_t inode = 0;
  int64_t mtime_ns = 0;
  int64_t size = 0;
  friend bool operator==(const FileVersion&, const FileVersion&) = default;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates `dir` and its parents; OK when it exists as a directory.
  virtual absl::Status CreateDirectories(const std::string& dir) = 0;
  // Entry names of `dir`, unordered.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // The first `max_bytes` of `path` (all of it when shorter).
  virtual absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) = 0;
  // Creates or truncates `path`, writes `contents`, fsyncs; on failure nothing is left at `path`.
  virtual absl::Status WriteFileDurably(const std::string& path, std::string_view contents) = 0;
  // Atomically replaces `to` with `from`.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // NOT_FOUND when there is no such file.
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Makes renames and removals in `dir` durable.
  virtual absl::Status SyncDirectory(const std::string& dir) = 0;
  // NOT_FOUND when there is no such file.
  virtual absl::StatusOr<FileVersion> StatFile(const std::string& path) = 0;
};

// The process-wide POSIX implementation (model/format/file_io); files are created with mode 0600
// (sessions are their clients' data). Never destroyed.
FileSystem& DefaultFileSystem();

}  // namespace linserve

#endif  // LINSERVE_SERVER_STORAGE_FILE_SYSTEM_H_
