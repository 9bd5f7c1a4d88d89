// SessionId: the unguessable name of a session (128 random bits from OpenSSL's CSPRNG, as 32
// lowercase hex digits). Holding an id is the capability to use the session.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_ID_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_ID_H_

#include <compare>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>

#include "absl/status/statusor.h"

namespace linserve {

struct SessionId {
  static constexpr int kHexDigits = 32;

  std::string value;

  friend auto operator<=>(const SessionId&, const SessionId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SessionId& id) {
    return H::combine(std::move(h), id.value);
  }
};

// A session id in 16 bytes instead of a 32-character string, for indexes that hold millions
// of them. Orders as the ids do.
struct PackedSessionId {
  uint64_t high = 0;
  uint64_t low = 0;

  friend auto operator<=>(const PackedSessionId&, const PackedSessionId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PackedSessionId& id) {
    return H::combine(std::move(h), id.high, id.low);
  }
};

// `id` must be valid (from NewSessionId or ParseSessionId).
PackedSessionId Pack(const SessionId& id);
SessionId Unpack(const PackedSessionId& id);

// A fresh random id. INTERNAL if the system's random source fails.
absl::StatusOr<SessionId> NewSessionId();

// Parses an id received from a client; INVALID_ARGUMENT naming `field` unless it is exactly
// 32 lowercase hex digits.
absl::StatusOr<SessionId> ParseSessionId(absl::string_view text, absl::string_view field);

// `bytes` random bytes as lowercase hex (request ids and the like). INTERNAL on failure.
absl::StatusOr<std::string> RandomHex(int bytes);

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_ID_H_
