// FaultyFileSystem: the POSIX file system with injected failures, for tests of what a full or
// read-only disk does to the SessionPersister and the SessionStore.
#ifndef LINSERVE_TESTS_SERVER_FAULTY_FILE_SYSTEM_H_
#define LINSERVE_TESTS_SERVER_FAULTY_FILE_SYSTEM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/file_system.h"

namespace linserve {

// The POSIX file system, failing with ENOSPC (or `error`) from the `fail_at`-th mutating call
// on (-1: never) until Heal().
class FaultyFileSystem : public FileSystem {
 public:
  void FailFrom(int64_t call, absl::Status error) {
    fail_at_ = call;
    error_ = std::move(error);
  }
  void Heal() { fail_at_ = -1; }
  int64_t mutating_calls() const { return calls_; }

  absl::Status CreateDirectories(const std::string& dir) override {
    if (absl::Status s = Maybe(); !s.ok()) return s;
    return DefaultFileSystem().CreateDirectories(dir);
  }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override {
    return DefaultFileSystem().ListDirectory(dir);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return DefaultFileSystem().ReadFile(path);
  }
  absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) override {
    return DefaultFileSystem().ReadFilePrefix(path, max_bytes);
  }
  absl::Status WriteFileDurably(const std::string& path, std::string_view contents) override {
    if (absl::Status s = Maybe(); !s.ok()) {
      // What a full disk does: part of the data reaches the file, then the write fails.
      DefaultFileSystem()
          .WriteFileDurably(path, contents.substr(0, contents.size() / 2))
          .IgnoreError();
      return s;
    }
    return DefaultFileSystem().WriteFileDurably(path, contents);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (absl::Status s = Maybe(); !s.ok()) return s;
    return DefaultFileSystem().RenameFile(from, to);
  }
  absl::Status RemoveFile(const std::string& path) override {
    if (absl::Status s = Maybe(); !s.ok()) return s;
    return DefaultFileSystem().RemoveFile(path);
  }
  absl::Status SyncDirectory(const std::string& dir) override {
    if (absl::Status s = Maybe(); !s.ok()) return s;
    return DefaultFileSystem().SyncDirectory(dir);
  }
  absl::StatusOr<FileVersion> StatFile(const std::string& path) override {
    return DefaultFileSystem().StatFile(path);
  }

 private:
  absl::Status Maybe() {
    const int64_t call = calls_++;
    if (fail_at_ >= 0 && call >= fail_at_) return error_;
    return absl::OkStatus();
  }
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> fail_at_{-1};
  absl::Status error_ = absl::ResourceExhaustedError("No space left on device");
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_FAULTY_FILE_SYSTEM_H_
