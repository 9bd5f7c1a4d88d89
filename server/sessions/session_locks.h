// SessionLocks: which sessions of a shared state directory this server may change.
//
// Servers sharing one --state_dir (replicas behind a proxy, docs/deployment.md) each hold a
// session's lock while they use it: from the moment a request or operation finds or creates
// the session until its change is on disk. Only the holder renames a session's file into place
// or removes it, so two servers never run requests on one session at once, never overwrite
// each other's turns and never delete a session the other is serving.
//
// A lock is an open file description's lock (fcntl F_OFD_SETLK, exclusive) on "ID.lock" in the
// directory: the kernel (or, across machines, the file server) releases it when its holder
// dies, SIGKILL included, so there is no lease to expire and no clock to trust. Locks here are
// counted: the file is created and locked by the first Acquire, and removed and unlocked by the
// last Release, so a lock file exists only while a server holds it. Whoever locked a file that
// was removed meanwhile sees that its inode is no longer the path's and tries again.
//
// Thread-safe: the engine thread acquires, the persister's writer thread releases.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_LOCKS_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_LOCKS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_id.h"

namespace linserve {

class SessionLocks {
 public:
  explicit SessionLocks(std::string dir);
  // Closes every lock file still held.
  ~SessionLocks();
  SessionLocks(const SessionLocks&) = delete;
  SessionLocks& operator=(const SessionLocks&) = delete;

  // Counts one more use of `id`'s lock, taking it when this server does not hold it yet.
  // UNAVAILABLE naming the session and the directory when another server holds it; the OS
  // error naming the path when the lock file cannot be opened or locked.
  absl::Status Acquire(const SessionId& id);
  // Counts one use less; the lock file is removed and the lock released with the last.
  void Release(const SessionId& id);
  // Whether this server holds `id`'s lock.
  bool Held(const SessionId& id) const;
  // Locks held now.
  int64_t held() const;

  std::string PathOf(const SessionId& id) const;

 private:
  struct Lock {
    int fd = -1;
    int64_t uses = 0;
  };

  const std::string dir_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<SessionId, Lock> locks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_LOCKS_H_
