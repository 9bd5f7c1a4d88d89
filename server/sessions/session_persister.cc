#include "server/sessions/session_persister.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr absl::string_view kExtension = ".session";
constexpr absl::string_view kTempSuffix = ".tmp";
constexpr absl::string_view kProbeName = ".linserve-probe";
// A probe lives for milliseconds: one this old was left by a server that died while starting.
constexpr absl::Duration kAbandonedProbeAge = absl::Hours(1);

absl::Status Unusable(const std::string& dir, const absl::Status& cause) {
  return absl::FailedPreconditionError(
      absl::StrCat("state_dir ", dir, " is unusable: ", cause.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionPersister>> SessionPersister::Open(
    const SessionPersisterOptions& options, const ModelConfig& config,
    std::string model_fingerprint, int64_t max_pending_tokens) {
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : DefaultFileSystem();
  const std::string& dir = options.dir;
  if (dir.empty()) return absl::InvalidArgumentError("state_dir must not be empty");
  if (absl::Status s = fs.CreateDirectories(dir); !s.ok()) return Unusable(dir, s);
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return Unusable(dir, names.status());
  // Named per process, so that replicas sharing the directory never write the same file.
  absl::StatusOr<std::string> tag = RandomHex(8);
  if (!tag.ok()) return tag.status();
  std::unique_ptr<SessionPersister> persister(new SessionPersister(
      options, fs, config, std::move(model_fingerprint), max_pending_tokens, *tag));
  // A crash between writing a temporary file and renaming it leaves the temporary file; the
  // record it would have replaced is still whole. Another server sharing the directory may be
  // writing one right now, under its session's lock: a temporary file is removed only when
  // that lock can be taken.
  const absl::Time now = absl::Now();
  for (const std::string& name : *names) {
    const std::string path = absl::StrCat(dir, "/", name);
    bool abandoned = false;
    if (absl::EndsWith(name, kTempSuffix)) {
      const size_t end = name.find(absl::StrCat(kExtension, "."));
      absl::StatusOr<SessionId> id =
          end == std::string::npos ? absl::StatusOr<SessionId>(absl::NotFoundError(""))
                                   : ParseSessionId(name.substr(0, end), "file name");
      if (id.ok() && persister->locks_.Acquire(*id).ok()) {
        if (absl::Status s = fs.RemoveFile(path); !s.ok() && !absl::IsNotFound(s)) {
          persister->locks_.Release(*id);
          return Unusable(dir, s);
        }
        persister->locks_.Release(*id);
        spdlog::info("state_dir {}: removed the abandoned temporary file {}", dir, name);
      }
      continue;
    }
    if (absl::StartsWith(name, kProbeName)) {
      absl::StatusOr<FileVersion> version = fs.StatFile(path);
      abandoned = version.ok() &&
                  now - absl::FromUnixNanos(version->mtime_ns) >= kAbandonedProbeAge;
    }
    if (!abandoned) continue;
    if (absl::Status s = fs.RemoveFile(path); !s.ok() && !absl::IsNotFound(s)) {
      return Unusable(dir, s);
    }
    spdlog::info("state_dir {}: removed the abandoned probe file {}", dir, name);
  }
  // Fail now, not at the first session, on a read-only or full file system.
  const std::string probe = absl::StrCat(dir, "/", kProbeName, "-", *tag);
  if (absl::Status s = fs.WriteFileDurably(probe, "probe"); !s.ok()) return Unusable(dir, s);
  if (absl::Status s = fs.RemoveFile(probe); !s.ok() && !absl::IsNotFound(s)) {
    return Unusable(dir, s);
  }
  if (absl::Status s = fs.SyncDirectory(dir); !s.ok()) return Unusable(dir, s);
  persister->thread_ = std::thread([p = persister.get()] { p->Run(); });
  return persister;
}

SessionPersister::SessionPersister(const SessionPersisterOptions& options, FileSystem& fs,
                                   const ModelConfig& config, std::string model_fingerprint,
                                   int64_t max_pending_tokens, std::string server_tag)
    : options_(options),
      fs_(fs),
      config_(config),
      model_fingerprint_(std::move(model_fingerprint)),
      max_pending_tokens_(max_pending_tokens),
      server_tag_(std::move(server_tag)),
      locks_(options.dir) {}

SessionPersister::~SessionPersister() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();  // not started when Open failed
}

std::string SessionPersister::PathOf(const SessionId& id) const {
  return absl::StrCat(options_.dir, "/", id.value, kExtension);
}

absl::StatusOr<SessionRecord> SessionPersister::Decode(const std::string& path, const SessionId& id,
                                                       absl::Time now) const {
  absl::StatusOr<std::string> bytes = fs_.ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<SessionRecord> record =
      DecodeSessionRecord(*bytes, id, config_, model_fingerprint_, max_pending_tokens_, now);
  if (record.ok() && record->snapshot.constraint.has_value() && options_.check_constraint) {
    if (absl::Status s = options_.check_constraint(*record->snapshot.constraint); !s.ok()) return s;
  }
  return record;
}

absl::StatusOr<SessionRecordHeader> SessionPersister::DecodeHeader(const std::string& path,
                                                                   const SessionId& id,
                                                                   absl::Time now) const {
  absl::StatusOr<std::string> bytes = fs_.ReadFilePrefix(path, kMaxSessionRecordHeaderBytes);
  if (!bytes.ok()) return bytes.status();
  return DecodeSessionRecordHeader(*bytes, id, model_fingerprint_, now);
}

std::vector<SessionRecord> SessionPersister::Load(absl::Time now) {
  std::vector<SessionRecord> records;
  absl::StatusOr<std::vector<std::string>> names = fs_.ListDirectory(options_.dir);
  if (!names.ok()) {
    spdlog::error("state_dir {}: cannot list it: {}", options_.dir, names.status().ToString());
    return records;
  }
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kExtension)) continue;
    const std::string path = absl::StrCat(options_.dir, "/", name);
    absl::StatusOr<SessionId> id =
        ParseSessionId(name.substr(0, name.size() - kExtension.size()), "file name");
    absl::StatusOr<FileVersion> version =
        id.ok() ? fs_.StatFile(path) : absl::StatusOr<FileVersion>(id.status());
    absl::StatusOr<SessionRecord> record =
        version.ok() ? Decode(path, *id, now) : absl::StatusOr<SessionRecord>(version.status());
    if (!record.ok()) {
      spdlog::warn("state_dir: not restoring {} (left in place): {}", path,
                   record.status().ToString());
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      versions_.insert_or_assign(*id, *version);
    }
    records.push_back(*std::move(record));
  }
  return records;
}

bool SessionPersister::ChangedElsewhere(const SessionId& id) {
  FileVersion known;
  {
    absl::MutexLock lock(&mu_);
    if (queued_.contains(id) || writing_.contains(id)) return false;
    auto it = versions_.find(id);
    if (it == versions_.end()) return false;
    known = it->second;
  }
  absl::StatusOr<FileVersion> now = fs_.StatFile(PathOf(id));
  if (!now.ok()) return absl::IsNotFound(now.status());
  return !(*now == known);
}

std::vector<SessionRecordHeader> SessionPersister::LoadIndex(absl::Time now) {
  std::vector<SessionRecordHeader> headers;
  absl::StatusOr<std::vector<std::string>> names = fs_.ListDirectory(options_.dir);
  if (!names.ok()) {
    spdlog::error("state_dir {}: cannot list it: {}", options_.dir, names.status().ToString());
    return headers;
  }
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kExtension)) continue;
    const std::string path = absl::StrCat(options_.dir, "/", name);
    absl::StatusOr<SessionId> id =
        ParseSessionId(name.substr(0, name.size() - kExtension.size()), "file name");
    absl::StatusOr<SessionRecordHeader> header =
        id.ok() ? DecodeHeader(path, *id, now) : absl::StatusOr<SessionRecordHeader>(id.status());
    if (!header.ok()) {
      spdlog::warn("state_dir: not restoring {} (left in place): {}", path,
                   header.status().ToString());
      continue;
    }
    headers.push_back(*std::move(header));
  }
  return headers;
}

absl::StatusOr<const SessionRecord*> SessionPersister::UnwrittenLocked(
    const SessionId& id) const {
  // The newest change first: queued_ holds what came after the batch being written.
  for (const auto* changes : {&queued_, &writing_}) {
    auto it = changes->find(id);
    if (it == changes->end()) continue;
    if (!it->second.has_value()) {
      return absl::NotFoundError(absl::StrCat("session ", id.value, ": removal queued"));
    }
    return &*it->second;
  }
  return nullptr;
}

absl::StatusOr<SessionRecord> SessionPersister::Read(const SessionId& id, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<const SessionRecord*> unwritten = UnwrittenLocked(id);
    if (!unwritten.ok()) return unwritten.status();
    if (*unwritten != nullptr) return **unwritten;
  }
  // Neither queued nor being written (both happen on the caller's thread): the file is the last
  // record written, whole. Its version is taken before the read, so that a file another server
  // replaces in between is read again next time (ChangedElsewhere).
  const std::string path = PathOf(id);
  absl::StatusOr<FileVersion> version = fs_.StatFile(path);
  if (!version.ok()) return version.status();
  absl::StatusOr<SessionRecord> record = Decode(path, id, now);
  if (record.ok()) {
    absl::MutexLock lock(&mu_);
    versions_.insert_or_assign(id, *version);
  }
  return record;
}

absl::StatusOr<SessionRecordHeader> SessionPersister::ReadHeader(const SessionId& id,
                                                                 absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<const SessionRecord*> unwritten = UnwrittenLocked(id);
    if (!unwritten.ok()) return unwritten.status();
    if (*unwritten != nullptr) return HeaderOf(**unwritten);
  }
  return DecodeHeader(PathOf(id), id, now);
}

void SessionPersister::Queue(const SessionId& id, std::optional<SessionRecord> change) {
  auto it = queued_.find(id);
  if (it != queued_.end()) {
    it->second = std::move(change);  // the queued change's use of the lock carries over
  } else if (absl::Status s = locks_.Acquire(id); s.ok()) {
    queued_.emplace(id, std::move(change));
  } else {
    spdlog::error("state_dir: session {} not queued for writing: {}", id.value, s.ToString());
    failing_.insert_or_assign(id, std::move(s));
    return;
  }
  fresh_ = true;
}

void SessionPersister::Put(SessionRecord record) {
  absl::MutexLock lock(&mu_);
  const SessionId id = record.id;
  Queue(id, std::move(record));
}

void SessionPersister::Remove(const SessionId& id) {
  absl::MutexLock lock(&mu_);
  Queue(id, std::nullopt);
}

void SessionPersister::WhenDurable(Done done) {
  absl::MutexLock lock(&mu_);
  waiters_.push_back({.ids = std::nullopt, .done = std::move(done)});
}

void SessionPersister::WhenDurable(std::vector<SessionId> ids, Done done) {
  absl::MutexLock lock(&mu_);
  waiters_.push_back({.ids = std::move(ids), .done = std::move(done)});
}

absl::Status SessionPersister::Flush() {
  absl::Notification flushed;
  absl::Status result;
  WhenDurable([&](absl::Status status) {
    result = std::move(status);
    flushed.Notify();
  });
  flushed.WaitForNotification();
  return result;
}

int64_t SessionPersister::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

int64_t SessionPersister::write_errors() const {
  absl::MutexLock lock(&mu_);
  return write_errors_;
}

bool SessionPersister::healthy() const {
  absl::MutexLock lock(&mu_);
  return failing_.empty();
}

absl::Status SessionPersister::Apply(const SessionId& id,
                                     const std::optional<SessionRecord>& change) {
  const std::string path = PathOf(id);
  if (!change.has_value()) {
    absl::Status status = fs_.RemoveFile(path);
    if (absl::IsNotFound(status)) status = absl::OkStatus();
    return status;
  }
  const std::string temp =
      absl::StrCat(path, ".", server_tag_, "-", temp_files_++, kTempSuffix);
  absl::Status status =
      fs_.WriteFileDurably(temp, EncodeSessionRecord(*change, model_fingerprint_));
  if (status.ok()) status = fs_.RenameFile(temp, path);
  if (!status.ok()) {
    if (absl::Status removed = fs_.RemoveFile(temp); !removed.ok() && !absl::IsNotFound(removed)) {
      stale_temps_.push_back(temp);
    }
  }
  return status;
}

bool SessionPersister::WakeLocked() const { return stop_ || fresh_ || !waiters_.empty(); }

void SessionPersister::Run() {
  for (bool last = false; !last;) {
    std::vector<Waiter> waiters;
    std::vector<absl::Status> outcomes;
    const absl::flat_hash_map<SessionId, std::optional<SessionRecord>>* batch = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &SessionPersister::WakeLocked),
                           options_.retry_interval);
      last = stop_;
      writing_.swap(queued_);
      batch = &writing_;
      waiters.swap(waiters_);
      fresh_ = false;
    }
    // The batch is read here without the lock: only Read shares it, and only reads it.
    const absl::Time started = absl::Now();
    std::erase_if(stale_temps_, [this](const std::string& temp) {
      const absl::Status removed = fs_.RemoveFile(temp);
      return removed.ok() || absl::IsNotFound(removed);
    });
    absl::Status first_error;
    std::vector<SessionId> done;
    std::vector<SessionId> failed;
    // The version each file was left at (nullopt: removed), for ChangedElsewhere.
    std::vector<std::pair<SessionId, std::optional<FileVersion>>> versions;
    // Changes dropped (their lock was lost: another server may hold the session now).
    std::vector<std::pair<SessionId, absl::Status>> dropped;
    absl::flat_hash_map<SessionId, absl::Status> errors;
    for (const auto& [id, record] : *batch) {
      // The fence: only the holder of a session's lock renames or removes its file.
      if (!locks_.Held(id)) {
        const absl::Status lost = absl::UnavailableError(absl::StrCat(
            "session ", id.value, ": its lock in state_dir ", options_.dir, " is not held here"));
        spdlog::error("state_dir: session {} dropped: {}", id.value, lost.ToString());
        if (first_error.ok()) first_error = lost;
        dropped.emplace_back(id, lost);
        continue;
      }
      const absl::Status status = Apply(id, record);
      if (status.ok()) {
        done.push_back(id);
        std::optional<FileVersion> version;
        if (record.has_value()) {
          absl::StatusOr<FileVersion> written = fs_.StatFile(PathOf(id));
          if (written.ok()) version = *written;
        }
        versions.emplace_back(id, version);
        continue;
      }
      spdlog::error("state_dir: session {} not {}: {}", id.value,
                    record.has_value() ? "written" : "removed", status.ToString());
      if (first_error.ok()) first_error = status;
      failed.push_back(id);
      errors.emplace(id, status);
    }
    if (!batch->empty()) {
      if (absl::Status s = fs_.SyncDirectory(options_.dir); !s.ok()) {
        spdlog::error("state_dir {}: {}", options_.dir, s.ToString());
        if (first_error.ok()) first_error = s;
        // The renames may not survive a crash: write those records again.
        for (const SessionId& id : done) errors.emplace(id, s);
        failed.insert(failed.end(), done.begin(), done.end());
        done.clear();
        versions.clear();
      }
    }
    {
      absl::MutexLock lock(&mu_);
      writes_ += static_cast<int64_t>(done.size());
      write_errors_ += static_cast<int64_t>(failed.size() + dropped.size());
      if (options_.write_errors != nullptr) {
        options_.write_errors->Increment(static_cast<double>(failed.size() + dropped.size()));
      }
      for (auto& [id, version] : versions) {
        if (version.has_value()) {
          versions_.insert_or_assign(id, *version);
        } else {
          versions_.erase(id);
        }
      }
      // Each change written gives back its use of the session's lock (a dropped one had none);
      // a failed one keeps it for the retry, unless a newer change queued meanwhile (holding its
      // own) wins.
      for (const SessionId& id : done) {
        failing_.erase(id);
        locks_.Release(id);
      }
      for (const auto& [id, status] : dropped) failing_.erase(id);
      for (const SessionId& id : failed) {
        failing_.insert_or_assign(id, errors.at(id));
        if (!queued_.try_emplace(id, std::move(writing_[id])).second) locks_.Release(id);
      }
      writing_.clear();
      // What each waiter hears: for the whole batch, its first error (or a write still
      // failing); for some sessions, the error of one whose latest change is not on disk.
      for (auto& [id, status] : dropped) errors.emplace(id, status);
      if (first_error.ok() && !failing_.empty()) first_error = failing_.begin()->second;
      outcomes.reserve(waiters.size());
      for (const Waiter& waiter : waiters) {
        absl::Status outcome = waiter.ids.has_value() ? absl::OkStatus() : first_error;
        for (const SessionId& id : waiter.ids.value_or(std::vector<SessionId>{})) {
          if (auto e = errors.find(id); e != errors.end()) {
            outcome = e->second;
            break;
          }
          if (auto f = failing_.find(id); f != failing_.end()) {
            outcome = f->second;
            break;
          }
        }
        outcomes.push_back(std::move(outcome));
      }
    }
    for (size_t i = 0; i < waiters.size(); ++i) std::move(waiters[i].done)(outcomes[i]);
    if (last) {
      if (!failed.empty()) {
        spdlog::error("state_dir {}: stopping with {} sessions not written", options_.dir,
                      failed.size());
      }
      break;
    }
    // The rate limit: the next batch starts batch_interval after this one did, or at once
    // when stopping.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&stop_), started + options_.batch_interval);
  }
}

}  // namespace linserve
