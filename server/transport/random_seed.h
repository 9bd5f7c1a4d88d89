// RandomSeed: the sampling seed of a request that sets none (gRPC GenerateRequest and the OpenAI
// API alike), drawn from the system's random source.
#ifndef LINSERVE_SERVER_TRANSPORT_RANDOM_SEED_H_
#define LINSERVE_SERVER_TRANSPORT_RANDOM_SEED_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace linserve {

// INTERNAL if the system's random source fails.
absl::StatusOr<uint64_t> RandomSeed();

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_RANDOM_SEED_H_
