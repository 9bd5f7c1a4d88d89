#include "server/sessions/session_record.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/storage/byte_codec.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

constexpr absl::string_view kMagic("LSVSREC\x1a", 8);
constexpr absl::string_view kFormat = "session record";

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(kFormat, ": ", what));
}

// A record's own fields, between its magic and its snapshot.
struct RecordFields {
  int64_t last_use_micros = 0;
  std::string tenant;
  uint64_t snapshot_bytes = 0;
};

// The one parser of those fields, for a whole record and for the first bytes of one alike.
absl::StatusOr<RecordFields> ReadFields(ByteReader& r) {
  const uint32_t version = r.ReadU32("version");
  if (!r.ok()) return r.status();
  if (version != kSessionRecordVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session record version ", version, " is not supported (this server reads ",
        kSessionRecordVersion, ")"));
  }
  RecordFields fields;
  fields.last_use_micros = r.ReadI64("last_use_time");
  fields.tenant = std::string(r.ReadString32("tenant", kMaxTenantBytes));
  fields.snapshot_bytes = r.ReadU64("snapshot length");
  if (!r.ok()) return r.status();
  return fields;
}

// last_use_time, checked against the snapshot's create_time and `now`.
absl::StatusOr<absl::Time> LastUseTime(int64_t last_use_micros, absl::Time create_time,
                                       absl::Time now) {
  if (last_use_micros < absl::ToUnixMicros(create_time)) {
    return Corrupt(absl::StrCat("last_use_time: ", last_use_micros, " precedes create_time"));
  }
  const absl::Time last_use_time = absl::FromUnixMicros(last_use_micros);
  if (last_use_time > now + kMaxSnapshotClockSkew) {
    return Corrupt(absl::StrCat("last_use_time: ", absl::FormatTime(last_use_time),
                                " lies in the future"));
  }
  return last_use_time;
}

}  // namespace

std::string EncodeSessionRecord(const SessionRecord& record, absl::string_view model_fingerprint) {
  const std::string snapshot = EncodeSnapshot(record.snapshot, model_fingerprint);
  ByteWriter w(kMagic, kMagic.size() + 4 + 8 + 4 + record.tenant.size() + 8 + snapshot.size() +
                           kSha256Bytes);
  w.PutU32(kSessionRecordVersion);
  w.PutI64(absl::ToUnixMicros(record.last_use_time));
  w.PutString32(record.tenant);
  w.PutU64(snapshot.size());
  w.PutBytes(snapshot);
  return std::move(w).Seal();
}

absl::StatusOr<SessionRecord> DecodeSessionRecord(absl::string_view bytes, SessionId id,
                                                  const ModelConfig& config,
                                                  absl::string_view model_fingerprint,
                                                  int64_t max_pending_tokens, absl::Time now) {
  ByteReader r(bytes, kFormat);
  r.ExpectMagic(kMagic);
  r.Unseal();
  absl::StatusOr<RecordFields> fields = ReadFields(r);
  if (!fields.ok()) return fields.status();
  if (fields->snapshot_bytes != r.remaining()) {
    return Corrupt("snapshot: length does not match the record");
  }
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(r.ReadRest(), config, model_fingerprint, max_pending_tokens, now);
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<absl::Time> last_use_time =
      LastUseTime(fields->last_use_micros, snapshot->create_time, now);
  if (!last_use_time.ok()) return last_use_time.status();
  return SessionRecord{.id = std::move(id),
                       .tenant = std::move(fields->tenant),
                       .last_use_time = *last_use_time,
                       .snapshot = *std::move(snapshot)};
}

absl::StatusOr<SessionRecordHeader> DecodeSessionRecordHeader(absl::string_view prefix,
                                                              SessionId id,
                                                              absl::string_view model_fingerprint,
                                                              absl::Time now) {
  ByteReader r(prefix, kFormat);
  r.ExpectMagic(kMagic);
  absl::StatusOr<RecordFields> fields = ReadFields(r);
  if (!fields.ok()) return fields.status();
  absl::StatusOr<SnapshotHeader> snapshot =
      DecodeSnapshotHeader(r.ReadRest(), model_fingerprint, now);
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<absl::Time> last_use_time =
      LastUseTime(fields->last_use_micros, snapshot->create_time, now);
  if (!last_use_time.ok()) return last_use_time.status();
  return SessionRecordHeader{.id = std::move(id),
                             .tenant = std::move(fields->tenant),
                             .last_use_time = *last_use_time,
                             .create_time = snapshot->create_time,
                             .num_tokens = snapshot->num_tokens};
}

SessionRecordHeader HeaderOf(const SessionRecord& record) {
  return SessionRecordHeader{.id = record.id,
                             .tenant = record.tenant,
                             .last_use_time = record.last_use_time,
                             .create_time = record.snapshot.create_time,
                             .num_tokens = record.snapshot.num_tokens};
}

}  // namespace linserve
