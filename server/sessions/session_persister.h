// SessionPersister: write-behind, crash-safe storage of session records in a directory
// (--state_dir), one file per session, "ID.session" (session_record.h).
//
// The engine thread hands over a record whenever a session changes (a request ended, a fork,
// an import, a create, an export's touch) and a removal when one is deleted or expires; that
// costs it a move, nothing more. A writer thread of its own takes everything queued at most
// once per `batch_interval` (a session changed several times within it is written once),
// encodes each record, writes a temporary file named for this server and this write
// ("ID.session.SERVER-N.tmp") and fsyncs it, renames it over "ID.session", removes the files of
// deleted sessions, then fsyncs the directory once for the whole batch. So a file is always
// either the previous whole record or the new whole record, and after a crash (SIGKILL, power
// loss) every change that WhenDurable reported as written is on disk.
//
// Servers may share the directory: a change is queued only while this server holds the
// session's lock (session_locks.h), and a queued change keeps a use of that lock until it is
// written, so only the lock's holder ever renames or removes a session's file. The writer checks
// the lock before each rename and removal (a change whose lock is gone is dropped, not written).
// At start, a temporary file is removed only when its session's lock can be taken (no server is
// writing it), and a probe file only when it is an hour old.
//
// A failed write (a full disk, an I/O error) is logged, counted (write_errors), reported to the
// WhenDurable callers waiting for that session, and retried with the next batch or after
// `retry_interval`, keeping the session's lock; healthy() is false until no write is failing.
//
// Thread-safe. Callbacks run on the writer thread and must not block.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_PERSISTER_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_PERSISTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/format/config.h"
#include "server/constraints/constraint_spec.h"
#include "server/storage/file_system.h"
#include "server/metrics/metrics.h"
#include "server/sessions/session_id.h"
#include "server/sessions/session_locks.h"
#include "server/sessions/session_record.h"

namespace linserve {

struct SessionPersisterOptions {
  // The directory of the session files; created if missing. Required.
  std::string dir;
  // Least time between the starts of two write batches: the rate limit, and how long changes
  // may coalesce. Default: 2 ms.
  absl::Duration batch_interval = absl::Milliseconds(2);
  // When a write failed and nothing else is queued, how long before it is tried again.
  // Default: 1 s.
  absl::Duration retry_interval = absl::Seconds(1);
  // The file system; nullptr means DefaultFileSystem(). Must outlive the persister.
  // Default: nullptr.
  FileSystem* file_system = nullptr;
  // Counts the writes and removals that failed (a metric); nullptr: not counted there.
  // Default: nullptr.
  Counter* write_errors = nullptr;
  // Checks the constraint state of a record read from a file (the engine compiles its spec and
  // checks the matcher bytes against the grammar); a record it refuses is not an intact record
  // for this server. Runs on the thread that reads. nullptr: not checked. Default: nullptr.
  std::function<absl::Status(const ConstraintState&)> check_constraint = nullptr;
};

class SessionPersister {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // Creates the directory, checks that it can be written (a probe file written and removed),
  // removes temporary files a crash left behind, and starts the writer thread. Records are
  // checked against (config, model_fingerprint, max_pending_tokens) when loaded.
  // FAILED_PRECONDITION naming the directory and the OS reason when it is unusable.
  static absl::StatusOr<std::unique_ptr<SessionPersister>> Open(
      const SessionPersisterOptions& options, const ModelConfig& config,
      std::string model_fingerprint, int64_t max_pending_tokens);
  // Writes what is queued (once) and stops the writer thread.
  ~SessionPersister();
  SessionPersister(const SessionPersister&) = delete;
  SessionPersister& operator=(const SessionPersister&) = delete;

  // Every record in the directory, as of `now`. Files that are not intact records for this
  // model are logged and left in place. Nothing is removed.
  std::vector<SessionRecord> Load(absl::Time now);
  // The locks of the sessions this server may change.
  SessionLocks& locks() { return locks_; }

  // Whether the session's file is no longer the version this persister last wrote or read
  // (another replica sharing the directory changed or removed it since). False while a write
  // or removal of it is queued or under way here, and for a session never written or read.
  bool ChangedElsewhere(const SessionId& id);

  // The header of every record in the directory (session_record.h), as of `now`, read from the
  // first bytes of each file: what an index needs, without reading the states. Files whose
  // header is not this model's are logged and left in place. Nothing is removed.
  std::vector<SessionRecordHeader> LoadIndex(absl::Time now);
  // The current record of session `id`: the one queued for writing if any (so what was handed
  // over is read back before it reaches the disk), else its file, decoded and checked whole:
  // how a server sharing the directory with others takes over a session it does not hold.
  // NOT_FOUND when its removal is queued or there is no file; the decoding errors of
  // DecodeSessionRecord and check_constraint's; the file system's errors naming the path.
  absl::StatusOr<SessionRecord> Read(const SessionId& id, absl::Time now);
  // The header of session `id`'s current record (the queued one if any, else its file's first
  // bytes): what expiry needs to see that another server used the session since. NOT_FOUND as
  // Read.
  absl::StatusOr<SessionRecordHeader> ReadHeader(const SessionId& id, absl::Time now);

  // Queues a write of `record`, replacing a queued write or removal of the same session. The
  // caller holds the session's lock; the queued change keeps a use of it until it is written.
  void Put(SessionRecord record);
  // Queues the removal of a session's file, replacing a queued write of it. The caller holds
  // the session's lock, as for Put.
  void Remove(const SessionId& id);
  // Runs `done` once every Put and Remove queued before this call has been attempted: with OK
  // when all of that batch reached the disk, else with the first error (the failed ones stay
  // queued for a retry).
  void WhenDurable(Done done);
  // Runs `done` once every Put and Remove queued before this call has been attempted: with OK
  // when the latest change of each of `ids` is on disk, else with the error of one that is not
  // (a failed write, retried later, or a change dropped because its lock was lost).
  void WhenDurable(std::vector<SessionId> ids, Done done);
  // Blocks until everything queued now, failed writes included, has been attempted once;
  // returns what WhenDurable would pass.
  absl::Status Flush();

  const std::string& dir() const { return options_.dir; }
  // Files written and removed, and operations that failed, since Open.
  int64_t writes() const;
  int64_t write_errors() const;
  // False while the latest write of some session failed (a full or failing disk).
  bool healthy() const;

 private:
  SessionPersister(const SessionPersisterOptions& options, FileSystem& fs,
                   const ModelConfig& config, std::string model_fingerprint,
                   int64_t max_pending_tokens, std::string server_tag);
  struct Waiter {
    std::optional<std::vector<SessionId>> ids;  // nullopt: the whole batch
    Done done;
  };
  bool WakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `change` of `id`: a queued change holds a use of the session's lock.
  void Queue(const SessionId& id, std::optional<SessionRecord> change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes or removes one session's file; the writer thread's part of a batch.
  absl::Status Apply(const SessionId& id, const std::optional<SessionRecord>& change);
  void Run();
  std::string PathOf(const SessionId& id) const;
  // The change of `id` not on disk yet, queued or being written: nullptr when there is none,
  // NOT_FOUND when it is a removal.
  absl::StatusOr<const SessionRecord*> UnwrittenLocked(const SessionId& id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record in the file at `path`, decoded whole; its header, from the file's first bytes.
  absl::StatusOr<SessionRecord> Decode(const std::string& path, const SessionId& id,
                                       absl::Time now) const;
  absl::StatusOr<SessionRecordHeader> DecodeHeader(const std::string& path, const SessionId& id,
                                                   absl::Time now) const;

  const SessionPersisterOptions options_;
  FileSystem& fs_;
  const ModelConfig config_;
  const std::string model_fingerprint_;
  const int64_t max_pending_tokens_;
  // Names this server's temporary files, with a counter of writes.
  const std::string server_tag_;
  int64_t temp_files_ = 0;  // writer thread only
  // This server's temporary files whose removal failed, removed before the next batch.
  std::vector<std::string> stale_temps_;  // writer thread only
  SessionLocks locks_;

  mutable absl::Mutex mu_;
  // Per session: the record to write, or nullopt for a removal.
  absl::flat_hash_map<SessionId, std::optional<SessionRecord>> queued_ ABSL_GUARDED_BY(mu_);
  // The batch the writer thread is writing: changed only by it, under mu_; read by it without
  // the lock and by Read under it.
  absl::flat_hash_map<SessionId, std::optional<SessionRecord>> writing_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // The sessions whose latest change could not be written, and why (retried).
  absl::flat_hash_map<SessionId, absl::Status> failing_ ABSL_GUARDED_BY(mu_);
  // The version of each file as this persister last wrote or read it.
  absl::flat_hash_map<SessionId, FileVersion> versions_ ABSL_GUARDED_BY(mu_);
  // Something was queued since the last batch (as opposed to retries only).
  bool fresh_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_PERSISTER_H_
