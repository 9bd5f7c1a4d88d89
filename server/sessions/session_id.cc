#include "server/sessions/session_id.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "openssl/rand.h"

namespace linserve {

absl::StatusOr<std::string> RandomHex(int bytes) {
  std::vector<unsigned char> raw(bytes);
  if (RAND_bytes(raw.data(), bytes) != 1) {
    return absl::InternalError("RAND_bytes failed: the system random source is unavailable");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
}

absl::StatusOr<SessionId> NewSessionId() {
  absl::StatusOr<std::string> hex = RandomHex(SessionId::kHexDigits / 2);
  if (!hex.ok()) return hex.status();
  return SessionId{*std::move(hex)};
}

namespace {

uint64_t PackHalf(absl::string_view hex) {
  uint64_t out = 0;
  for (char c : hex) out = (out << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  return out;
}

}  // namespace

PackedSessionId Pack(const SessionId& id) {
  const absl::string_view hex = id.value;
  return {.high = PackHalf(hex.substr(0, 16)), .low = PackHalf(hex.substr(16, 16))};
}

SessionId Unpack(const PackedSessionId& id) {
  return SessionId{absl::StrCat(absl::Hex(id.high, absl::kZeroPad16),
                                absl::Hex(id.low, absl::kZeroPad16))};
}

absl::StatusOr<SessionId> ParseSessionId(absl::string_view text, absl::string_view field) {
  bool valid = text.size() == SessionId::kHexDigits;
  for (char c : text) {
    valid = valid && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  }
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": a session id is ", SessionId::kHexDigits, " lowercase hex digits, got \"",
        absl::CHexEscape(text.substr(0, 64)), text.size() > 64 ? "...\"" : "\""));
  }
  return SessionId{std::string(text)};
}

}  // namespace linserve
