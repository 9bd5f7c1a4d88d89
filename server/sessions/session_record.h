// SessionRecord: what --state_dir holds for one session, one file per session ("ID.session").
//
// A record is a snapshot (snapshot.h, the portable export format) plus what belongs to this
// server and not to the snapshot: the session's tenant (the one that created or imported it)
// and its last use, so a restart changes nothing a client can see (create_time travels in the
// snapshot).
//
// Layout (version 1, little-endian, server/storage/byte_codec.h):
//   magic "LSVSREC\x1a" | u32 version | i64 last_use_time (µs since the Unix epoch) |
//   u32 n + n bytes: tenant | u64 n + n bytes: snapshot | 32 bytes: SHA-256 of everything before.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_RECORD_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/format/config.h"
#include "server/sessions/session_id.h"
#include "server/sessions/snapshot.h"

namespace linserve {

inline constexpr uint32_t kSessionRecordVersion = 1;
// Longest tenant name a record may carry.
inline constexpr uint32_t kMaxTenantBytes = 1024;

struct SessionRecord {
  SessionId id;
  // The tenant the session belongs to; "" without authentication.
  std::string tenant;
  absl::Time last_use_time = absl::UnixEpoch();
  SessionSnapshot snapshot;
};

// Serialises everything but the id (the file name carries it).
std::string EncodeSessionRecord(const SessionRecord& record, absl::string_view model_fingerprint);

// Parses and checks a record for the model (config, fingerprint) at time `now`, with the
// snapshot checked as DecodeSnapshot does. last_use_time must not precede the snapshot's
// create_time nor lie more than kMaxSnapshotClockSkew after `now`. Errors: INVALID_ARGUMENT
// for bytes that are not an intact record (the message names the field), FAILED_PRECONDITION
// for an intact one this server cannot use (another version, another model).
absl::StatusOr<SessionRecord> DecodeSessionRecord(absl::string_view bytes, SessionId id,
                                                  const ModelConfig& config,
                                                  absl::string_view model_fingerprint,
                                                  int64_t max_pending_tokens, absl::Time now);

// What an index of the records needs, read from a record's first kMaxSessionRecordHeaderBytes.
struct SessionRecordHeader {
  SessionId id;
  std::string tenant;
  absl::Time last_use_time = absl::UnixEpoch();
  absl::Time create_time = absl::UnixEpoch();
  int64_t num_tokens = 0;
};
inline constexpr size_t kMaxSessionRecordHeaderBytes =
    8 + 4 + 8 + 4 + kMaxTenantBytes + 8 + kMaxSnapshotHeaderBytes;

// Parses the header of a record from its first bytes (the whole record is fine too), with the
// checks DecodeSessionRecord makes on those fields; the checksum, which needs the whole record,
// is checked when the record is decoded for use.
absl::StatusOr<SessionRecordHeader> DecodeSessionRecordHeader(absl::string_view prefix,
                                                              SessionId id,
                                                              absl::string_view model_fingerprint,
                                                              absl::Time now);

// The header of a record in memory (one not written yet).
SessionRecordHeader HeaderOf(const SessionRecord& record);

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_RECORD_H_
