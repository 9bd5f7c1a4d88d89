#include "model/format/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

// The status for a failed system call: its errno mapped to a code (ENOENT -> NOT_FOUND, EACCES
// -> PERMISSION_DENIED, ...), the message naming the path, the operation and the OS reason.
absl::Status OsError(int error, const std::string& path, std::string_view what) {
  return absl::ErrnoToStatus(error, absl::StrCat(path, ": ", std::string(what), " failed"));
}

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  return ReadFilePrefix(path, std::numeric_limits<size_t>::max());
}

absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, path, "open");
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return OsError(errno, path, "stat");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::string contents;
  contents.resize(std::min(static_cast<size_t>(st.st_size), max_bytes));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return OsError(errno, path, "read");
    }
    if (n == 0) {
      return absl::InternalError(absl::StrCat(path, ": file shrank while being read (", done,
                                              " of ", contents.size(), " bytes)"));
    }
    done += static_cast<size_t>(n);
  }
  return contents;
}

absl::Status WriteFileDurably(const std::string& path, std::string_view contents, int mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        static_cast<mode_t>(mode));
  if (fd < 0) return OsError(errno, path, "create");
  size_t done = 0;
  int error = 0;
  const char* what = "write";
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0 && ::fsync(fd) != 0) {
    error = errno;
    what = "fsync";
  }
  if (::close(fd) != 0 && error == 0) {
    error = errno;
    what = "close";
  }
  if (error != 0) {
    ::unlink(path.c_str());
    return OsError(error, path, what);
  }
  return absl::OkStatus();
}

absl::Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return OsError(errno, absl::StrCat(from, " -> ", to), "rename");
  }
  return absl::OkStatus();
}

absl::Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return OsError(errno, path, "remove");
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, dir, "open directory");
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return OsError(errno, dir, "fsync directory");
  return absl::OkStatus();
}

absl::Status CreateDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return OsError(ec.value(), dir, "create directory");
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return OsError(errno, dir, "list directory");
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(d)) {
    const std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int error = errno;
  ::closedir(d);
  if (error != 0) return OsError(error, dir, "list directory");
  return names;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  if (absl::Status s = WriteFileDurably(temp, contents); !s.ok()) return s;
  if (absl::Status s = RenameFile(temp, path); !s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return SyncDirectory(parent.empty() ? "." : parent.string());
}

}  // namespace linserve
