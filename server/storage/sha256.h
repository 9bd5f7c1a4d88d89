// SHA-256 of a byte string (OpenSSL), the checksum of every file and snapshot the engine writes.
#ifndef LINSERVE_SERVER_STORAGE_SHA256_H_
#define LINSERVE_SERVER_STORAGE_SHA256_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace linserve {

inline constexpr size_t kSha256Bytes = 32;

// The digest's kSha256Bytes raw bytes.
std::string Sha256(absl::string_view bytes);

}  // namespace linserve

#endif  // LINSERVE_SERVER_STORAGE_SHA256_H_
