#include "server/transport/random_seed.h"

#include "absl/status/status.h"
#include "openssl/rand.h"

namespace linserve {

absl::StatusOr<uint64_t> RandomSeed() {
  uint64_t seed = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&seed), sizeof(seed)) != 1) {
    return absl::InternalError("RAND_bytes failed drawing a seed");
  }
  return seed;
}

}  // namespace linserve
