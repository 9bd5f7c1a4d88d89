#include "server/storage/file_system.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/format/file_io.h"

namespace linserve {
namespace {

class PosixFileSystem final : public FileSystem {
 public:
  absl::Status CreateDirectories(const std::string& dir) override {
    return linserve::CreateDirectories(dir);
  }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir) override {
    return linserve::ListDirectory(dir);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return ReadFileToString(path);
  }
  absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) override {
    return linserve::ReadFilePrefix(path, max_bytes);
  }
  absl::Status WriteFileDurably(const std::string& path, std::string_view contents) override {
    return linserve::WriteFileDurably(path, contents, 0600);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return linserve::RenameFile(from, to);
  }
  absl::Status RemoveFile(const std::string& path) override {
    return linserve::RemoveFile(path);
  }
  absl::Status SyncDirectory(const std::string& dir) override {
    return linserve::SyncDirectory(dir);
  }
  absl::StatusOr<FileVersion> StatFile(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": stat failed"));
    }
    return FileVersion{.inode = st.st_ino,
                       .mtime_ns = st.st_mtim.tv_sec * int64_t{1000000000} + st.st_mtim.tv_nsec,
                       .size = st.st_size};
  }
};

}  // namespace

FileSystem& DefaultFileSystem() {
  static FileSystem* const fs = new PosixFileSystem();
  return *fs;
}

}  // namespace linserve
