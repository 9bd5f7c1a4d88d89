#include "model/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, path, "open");
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return OsError(errno, path, "stat");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::string contents;
  contents.resize(static_cast<size_t>(st.st_size));
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

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return OsError(errno, temp, "create");
  size_t done = 0;
  int error = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    return OsError(error, path, "write");
  }
  return absl::OkStatus();
}

}  // namespace linserve
