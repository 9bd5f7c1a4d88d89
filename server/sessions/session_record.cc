#include "server/sessions/session_record.h"

#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

constexpr absl::string_view kMagic("LSVSREC\x1a", 8);

template <typename T>
void Put(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Get(absl::string_view& in, T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (in.size() < sizeof(T)) return false;
  std::memcpy(&value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a valid session record: ", what));
}

}  // namespace

std::string EncodeSessionRecord(const SessionRecord& record, absl::string_view model_fingerprint) {
  const std::string snapshot = EncodeSnapshot(record.snapshot, model_fingerprint);
  std::string out;
  out.reserve(kMagic.size() + 4 + 8 + 4 + record.tenant.size() + 8 + snapshot.size() +
              kSha256Bytes);
  out.append(kMagic.data(), kMagic.size());
  Put<uint32_t>(out, kSessionRecordVersion);
  Put<int64_t>(out, absl::ToUnixMicros(record.last_use_time));
  Put<uint32_t>(out, static_cast<uint32_t>(record.tenant.size()));
  out.append(record.tenant);
  Put<uint64_t>(out, snapshot.size());
  out.append(snapshot);
  out.append(Sha256(out));
  return out;
}

absl::StatusOr<SessionRecord> DecodeSessionRecord(absl::string_view bytes, SessionId id,
                                                  const ModelConfig& config,
                                                  absl::string_view model_fingerprint,
                                                  int64_t max_pending_tokens, absl::Time now) {
  if (bytes.size() < kMagic.size() + 4 + kSha256Bytes) return Corrupt("truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - kSha256Bytes);
  if (body.substr(0, kMagic.size()) != kMagic) return Corrupt("bad magic");
  if (Sha256(body) != bytes.substr(body.size())) return Corrupt("checksum mismatch");
  absl::string_view in = body.substr(kMagic.size());
  uint32_t version = 0;
  Get(in, version);
  if (version != kSessionRecordVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session record version ", version, " is not supported (this server reads ",
        kSessionRecordVersion, ")"));
  }
  int64_t last_use_micros = 0;
  uint32_t owner_bytes = 0;
  if (!Get(in, last_use_micros) || !Get(in, owner_bytes)) return Corrupt("truncated");
  if (owner_bytes > kMaxTenantBytes || owner_bytes > in.size()) {
    return Corrupt(absl::StrCat("owner: ", owner_bytes, " bytes"));
  }
  SessionRecord record;
  record.id = std::move(id);
  record.tenant = std::string(in.substr(0, owner_bytes));
  in.remove_prefix(owner_bytes);
  uint64_t snapshot_bytes = 0;
  if (!Get(in, snapshot_bytes) || snapshot_bytes != in.size()) {
    return Corrupt("snapshot: length does not match the record");
  }
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(in, config, model_fingerprint, max_pending_tokens, now);
  if (!snapshot.ok()) return snapshot.status();
  record.snapshot = *std::move(snapshot);
  if (last_use_micros < absl::ToUnixMicros(record.snapshot.create_time)) {
    return Corrupt(absl::StrCat("last_use_time: ", last_use_micros, " precedes create_time"));
  }
  record.last_use_time = absl::FromUnixMicros(last_use_micros);
  if (record.last_use_time > now + kMaxSnapshotClockSkew) {
    return Corrupt(absl::StrCat("last_use_time: ", absl::FormatTime(record.last_use_time),
                                " lies in the future"));
  }
  return record;
}

absl::StatusOr<SessionRecordHeader> DecodeSessionRecordHeader(absl::string_view prefix,
                                                              SessionId id,
                                                              absl::string_view model_fingerprint,
                                                              absl::Time now) {
  if (prefix.substr(0, kMagic.size()) != kMagic) return Corrupt("bad magic");
  absl::string_view in = prefix.substr(kMagic.size());
  uint32_t version = 0;
  if (!Get(in, version)) return Corrupt("truncated");
  if (version != kSessionRecordVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session record version ", version, " is not supported (this server reads ",
        kSessionRecordVersion, ")"));
  }
  int64_t last_use_micros = 0;
  uint32_t owner_bytes = 0;
  uint64_t snapshot_bytes = 0;
  if (!Get(in, last_use_micros) || !Get(in, owner_bytes)) return Corrupt("truncated");
  if (owner_bytes > kMaxTenantBytes || owner_bytes > in.size()) {
    return Corrupt(absl::StrCat("owner: ", owner_bytes, " bytes"));
  }
  SessionRecordHeader header;
  header.id = std::move(id);
  header.tenant = std::string(in.substr(0, owner_bytes));
  in.remove_prefix(owner_bytes);
  if (!Get(in, snapshot_bytes)) return Corrupt("truncated");
  absl::StatusOr<SnapshotHeader> snapshot = DecodeSnapshotHeader(in, model_fingerprint, now);
  if (!snapshot.ok()) return snapshot.status();
  if (last_use_micros < absl::ToUnixMicros(snapshot->create_time)) {
    return Corrupt(absl::StrCat("last_use_time: ", last_use_micros, " precedes create_time"));
  }
  header.last_use_time = absl::FromUnixMicros(last_use_micros);
  if (header.last_use_time > now + kMaxSnapshotClockSkew) {
    return Corrupt(absl::StrCat("last_use_time: ", absl::FormatTime(header.last_use_time),
                                " lies in the future"));
  }
  header.create_time = snapshot->create_time;
  header.num_tokens = snapshot->num_tokens;
  return header;
}

}  // namespace linserve
