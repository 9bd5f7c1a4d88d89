#include "client/cli/files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace linserve::cli {
namespace {

absl::Status FileError(const std::string& path, absl::string_view action, int error) {
  const std::string message = absl::StrCat(path, ": cannot ", action, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case EISDIR:
      return absl::FailedPreconditionError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, Io& io) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(io.in), {});
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(path, "open it", errno);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return FileError(path, "read it", errno);
  // An empty file leaves the stream's failbit set by operator<<; its contents are still "".
  return contents.str();
}

absl::Status WriteWholeFile(const std::string& path, absl::string_view data, Io& io) {
  if (path == "-") {
    io.out.write(data.data(), static_cast<std::streamsize>(data.size()));
    io.out.flush();
    return io.out ? absl::OkStatus() : absl::UnknownError("stdout: write failed");
  }
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FileError(path, "create it", errno);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return FileError(path, "write it", errno);
  return absl::OkStatus();
}

}  // namespace linserve::cli
