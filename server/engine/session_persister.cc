#include "server/engine/session_persister.h"

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
  // A crash between writing a temporary file and renaming it leaves the temporary file; the
  // record it would have replaced is still whole. Replicas sharing the directory may remove
  // each other's files here: one already gone is fine.
  for (const std::string& name : *names) {
    if (absl::EndsWith(name, kTempSuffix) || absl::StartsWith(name, kProbeName)) {
      if (absl::Status s = fs.RemoveFile(absl::StrCat(dir, "/", name));
          !s.ok() && !absl::IsNotFound(s)) {
        return Unusable(dir, s);
      }
      spdlog::info("state_dir {}: removed the leftover temporary file {}", dir, name);
    }
  }
  // Fail now, not at the first session, on a read-only or full file system.
  // Named per process, so that replicas starting together on one directory do not collide.
  absl::StatusOr<std::string> suffix = RandomHex(8);
  if (!suffix.ok()) return suffix.status();
  const std::string probe = absl::StrCat(dir, "/", kProbeName, "-", *suffix);
  if (absl::Status s = fs.WriteFileDurably(probe, "probe"); !s.ok()) return Unusable(dir, s);
  if (absl::Status s = fs.RemoveFile(probe); !s.ok() && !absl::IsNotFound(s)) {
    return Unusable(dir, s);
  }
  if (absl::Status s = fs.SyncDirectory(dir); !s.ok()) return Unusable(dir, s);
  std::unique_ptr<SessionPersister> persister(
      new SessionPersister(options, fs, config, std::move(model_fingerprint), max_pending_tokens));
  persister->thread_ = std::thread([p = persister.get()] { p->Run(); });
  return persister;
}

SessionPersister::SessionPersister(const SessionPersisterOptions& options, FileSystem& fs,
                                   const ModelConfig& config, std::string model_fingerprint,
                                   int64_t max_pending_tokens)
    : options_(options),
      fs_(fs),
      config_(config),
      model_fingerprint_(std::move(model_fingerprint)),
      max_pending_tokens_(max_pending_tokens) {}

SessionPersister::~SessionPersister() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::string SessionPersister::PathOf(const SessionId& id) const {
  return absl::StrCat(options_.dir, "/", id.value, kExtension);
}

absl::StatusOr<SessionRecord> SessionPersister::Decode(const std::string& path, const SessionId& id,
                                                       absl::Time now) const {
  absl::StatusOr<std::string> bytes = fs_.ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return DecodeSessionRecord(*bytes, id, config_, model_fingerprint_, max_pending_tokens_, now);
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
    absl::StatusOr<std::string> bytes = id.ok()
                                            ? fs_.ReadFilePrefix(path, kMaxSessionRecordHeaderBytes)
                                            : absl::StatusOr<std::string>(id.status());
    absl::StatusOr<SessionRecordHeader> header =
        bytes.ok() ? DecodeSessionRecordHeader(*bytes, *id, model_fingerprint_, now)
                   : absl::StatusOr<SessionRecordHeader>(bytes.status());
    if (!header.ok()) {
      spdlog::warn("state_dir: not restoring {} (left in place): {}", path,
                   header.status().ToString());
      continue;
    }
    headers.push_back(*std::move(header));
  }
  return headers;
}

absl::StatusOr<SessionRecord> SessionPersister::Read(const SessionId& id, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    // The newest change first: queued_ holds what came after the batch being written.
    for (const auto* changes : {&queued_, &writing_}) {
      auto it = changes->find(id);
      if (it == changes->end()) continue;
      if (!it->second.has_value()) {
        return absl::NotFoundError(absl::StrCat("session ", id.value, ": removal queued"));
      }
      return *it->second;
    }
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

void SessionPersister::Put(SessionRecord record) {
  absl::MutexLock lock(&mu_);
  const SessionId id = record.id;
  queued_.insert_or_assign(id, std::move(record));
  fresh_ = true;
}

void SessionPersister::Remove(const SessionId& id) {
  absl::MutexLock lock(&mu_);
  queued_.insert_or_assign(id, std::nullopt);
  fresh_ = true;
}

void SessionPersister::WhenDurable(Done done) {
  absl::MutexLock lock(&mu_);
  waiters_.push_back(std::move(done));
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

bool SessionPersister::WakeLocked() const { return stop_ || fresh_ || !waiters_.empty(); }

void SessionPersister::Run() {
  for (bool last = false; !last;) {
    std::vector<Done> waiters;
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
    absl::Status first_error;
    std::vector<SessionId> done;
    std::vector<SessionId> failed;
    // The version each file was left at (nullopt: removed), for ChangedElsewhere.
    std::vector<std::pair<SessionId, std::optional<FileVersion>>> versions;
    for (const auto& [id, record] : *batch) {
      const std::string path = PathOf(id);
      absl::Status status;
      if (record.has_value()) {
        const std::string temp = absl::StrCat(path, kTempSuffix);
        status = fs_.WriteFileDurably(temp, EncodeSessionRecord(*record, model_fingerprint_));
        if (status.ok()) status = fs_.RenameFile(temp, path);
        if (!status.ok()) fs_.RemoveFile(temp).IgnoreError();
      } else {
        status = fs_.RemoveFile(path);
        if (absl::IsNotFound(status)) status = absl::OkStatus();
      }
      if (status.ok()) {
        done.push_back(id);
        std::optional<FileVersion> version;
        if (record.has_value()) {
          absl::StatusOr<FileVersion> written = fs_.StatFile(path);
          if (written.ok()) version = *written;
        }
        versions.emplace_back(id, version);
        continue;
      }
      spdlog::error("state_dir: session {} not {}: {}", id.value,
                    record.has_value() ? "written" : "removed", status.ToString());
      if (first_error.ok()) first_error = status;
      failed.push_back(id);
    }
    if (!batch->empty()) {
      if (absl::Status s = fs_.SyncDirectory(options_.dir); !s.ok()) {
        spdlog::error("state_dir {}: {}", options_.dir, s.ToString());
        if (first_error.ok()) first_error = s;
        // The renames may not survive a crash: write those records again.
        failed.insert(failed.end(), done.begin(), done.end());
        done.clear();
      }
    }
    {
      absl::MutexLock lock(&mu_);
      writes_ += static_cast<int64_t>(done.size());
      write_errors_ += static_cast<int64_t>(failed.size());
      for (auto& [id, version] : versions) {
        if (version.has_value()) {
          versions_.insert_or_assign(id, *version);
        } else {
          versions_.erase(id);
        }
      }
      // A newer change queued meanwhile wins over a failed older one.
      for (const SessionId& id : failed) queued_.try_emplace(id, std::move(writing_[id]));
      writing_.clear();
    }
    for (Done& waiter : waiters) std::move(waiter)(first_error);
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
