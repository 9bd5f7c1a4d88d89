#include "server/sessions/session_locks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr absl::string_view kLockExtension = ".lock";

absl::Status OsError(absl::string_view what, const std::string& path, int error) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

// Locks the file at `path` (created if missing) for this open file description. Returns the
// descriptor, -1 with `error` = EAGAIN when another description holds the lock.
int LockFile(const std::string& path, int& error) {
  // A lock file removed between open and lock is replaced by a new one: lock that instead.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      error = errno;
      return -1;
    }
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_SETLK, &lock) != 0) {
      error = errno == EACCES ? EAGAIN : errno;
      ::close(fd);
      return -1;
    }
    struct stat locked = {};
    struct stat current = {};
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &current) == 0 &&
        locked.st_ino == current.st_ino && locked.st_dev == current.st_dev) {
      return fd;
    }
    ::close(fd);
  }
  error = EAGAIN;
  return -1;
}

}  // namespace

SessionLocks::SessionLocks(std::string dir) : dir_(std::move(dir)) {}

SessionLocks::~SessionLocks() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, held] : locks_) ::close(held.fd);
}

std::string SessionLocks::PathOf(const SessionId& id) const {
  return absl::StrCat(dir_, "/", id.value, kLockExtension);
}

absl::Status SessionLocks::Acquire(const SessionId& id) {
  absl::MutexLock lock(&mu_);
  auto it = locks_.find(id);
  if (it != locks_.end()) {
    ++it->second.uses;
    return absl::OkStatus();
  }
  const std::string path = PathOf(id);
  int error = 0;
  const int fd = LockFile(path, error);
  if (fd < 0) {
    if (error == EAGAIN) {
      return absl::UnavailableError(
          absl::StrCat("session ", id.value, " is in use by another server sharing state_dir ",
                       dir_, "; retry"));
    }
    return OsError("cannot lock", path, error);
  }
  locks_.emplace(id, Lock{.fd = fd, .uses = 1});
  return absl::OkStatus();
}

void SessionLocks::Release(const SessionId& id) {
  absl::MutexLock lock(&mu_);
  auto it = locks_.find(id);
  if (it == locks_.end()) {
    spdlog::error("session {}: released a lock this server does not hold", id.value);
    return;
  }
  if (--it->second.uses > 0) return;
  // Removed while still locked: a server that locks the old file next finds it gone.
  ::unlink(PathOf(id).c_str());
  ::close(it->second.fd);
  locks_.erase(it);
}

bool SessionLocks::Held(const SessionId& id) const {
  absl::MutexLock lock(&mu_);
  return locks_.contains(id);
}

int64_t SessionLocks::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(locks_.size());
}

}  // namespace linserve
