#include "server/storage/sha256.h"

#include "openssl/sha.h"

namespace linserve {

static_assert(kSha256Bytes == SHA256_DIGEST_LENGTH);

std::string Sha256(absl::string_view bytes) {
  unsigned char digest[kSha256Bytes];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), kSha256Bytes);
}

}  // namespace linserve
