#include "server/sessions/snapshot.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "model/format/session_state.h"
#include "server/storage/byte_codec.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

constexpr absl::string_view kMagic("LSVSNAP\x1a", 8);
constexpr absl::string_view kFormat = "session snapshot";
constexpr uint32_t kMaxFingerprintBytes = 256;

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(kFormat, ": ", what));
}

absl::string_view Abbreviated(absl::string_view fingerprint) { return fingerprint.substr(0, 16); }

// The magic and the version, read before the checksum is checked: a snapshot of another
// version is FAILED_PRECONDITION whatever its checksum.
absl::StatusOr<uint32_t> ReadVersion(ByteReader& r) {
  r.ExpectMagic(kMagic);
  const uint32_t version = r.ReadU32("version");
  if (!r.ok()) return r.status();
  if (version < 1 || version > kSnapshotVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot: format version ", version,
                     " is not supported (this server reads versions 1 to ", kSnapshotVersion,
                     ")"));
  }
  return version;
}

// has_constraint and the constraint after it (version 2 on).
absl::StatusOr<std::optional<ConstraintState>> ReadConstraint(ByteReader& r) {
  const uint8_t has_constraint = r.ReadU8("has_constraint");
  if (!r.ok()) return r.status();
  if (has_constraint > 1) {
    return Corrupt(absl::StrCat("has_constraint: ", has_constraint, " is neither 0 nor 1"));
  }
  if (has_constraint == 0) return std::nullopt;
  const uint8_t kind = r.ReadU8("constraint kind");
  const absl::string_view text =
      r.ReadString32("constraint text", kMaxSnapshotConstraintTextBytes);
  const absl::string_view matcher = r.ReadString32("constraint matcher", kMaxSnapshotMatcherBytes);
  if (!r.ok()) return r.status();
  if (kind < static_cast<uint8_t>(ConstraintKind::kJsonSchema) ||
      kind > static_cast<uint8_t>(ConstraintKind::kGrammar)) {
    return Corrupt(absl::StrCat("constraint kind: ", kind,
                                " is not a known kind (1 json_schema, 2 json_object, 3 regex, "
                                "4 grammar)"));
  }
  return ConstraintState{
      .spec = {.kind = static_cast<ConstraintKind>(kind), .text = std::string(text)},
      .matcher = std::string(matcher)};
}

// The fields after the version and before the state (see the layout in snapshot.h).
absl::StatusOr<SnapshotHeader> ReadHeader(ByteReader& r, absl::string_view model_fingerprint,
                                          absl::Time now) {
  const absl::string_view fingerprint = r.ReadString32("model fingerprint", kMaxFingerprintBytes);
  if (!r.ok()) return r.status();
  if (fingerprint != model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot: made by model ", Abbreviated(fingerprint),
                     "... but this server runs model ", Abbreviated(model_fingerprint),
                     "...; a session only continues on the model that produced it"));
  }
  SnapshotHeader header;
  const int64_t create_micros = r.ReadI64("create_time");
  header.num_tokens = r.ReadI64("num_tokens");
  header.position = r.ReadI64("position");
  if (!r.ok()) return r.status();
  if (create_micros < 0) {
    return Corrupt(absl::StrCat("create_time: ", create_micros,
                                " µs since the Unix epoch is before the epoch"));
  }
  header.create_time = absl::FromUnixMicros(create_micros);
  if (header.create_time > now + kMaxSnapshotClockSkew) {
    return Corrupt(absl::StrCat("create_time: ", absl::FormatTime(header.create_time),
                                " is in the future (now ", absl::FormatTime(now),
                                "; allowed clock skew ",
                                absl::FormatDuration(kMaxSnapshotClockSkew), ")"));
  }
  if (header.num_tokens < 0 || header.num_tokens > kMaxSnapshotTokens) {
    return Corrupt(absl::StrCat("num_tokens: ", header.num_tokens, " is outside [0, ",
                                kMaxSnapshotTokens, "]"));
  }
  if (header.position < 0 || header.position > header.num_tokens) {
    return Corrupt(absl::StrCat("position: ", header.position,
                                " is outside [0, num_tokens = ", header.num_tokens, "]"));
  }
  return header;
}

}  // namespace

std::string EncodeSnapshot(const SessionSnapshot& snapshot, absl::string_view model_fingerprint) {
  ByteWriter w(kMagic);
  w.PutU32(kSnapshotVersion);
  w.PutString32(model_fingerprint);
  w.PutI64(absl::ToUnixMicros(snapshot.create_time));
  w.PutI64(snapshot.num_tokens);
  w.PutI64(snapshot.state.position);
  w.PutU64(snapshot.state.state.size());
  w.PutF32s(snapshot.state.state);
  w.PutU32(static_cast<uint32_t>(snapshot.pending.size()));
  w.PutI32s(snapshot.pending);
  w.PutU32(static_cast<uint32_t>(snapshot.token_counts.size()));
  for (const auto& [token, count] : snapshot.token_counts) {
    w.PutI32(token);
    w.PutI64(count);
  }
  w.PutU8(snapshot.constraint.has_value() ? 1 : 0);
  if (snapshot.constraint.has_value()) {
    w.PutU8(static_cast<uint8_t>(snapshot.constraint->spec.kind));
    w.PutString32(snapshot.constraint->spec.text);
    w.PutString32(snapshot.constraint->matcher);
  }
  return std::move(w).Seal();
}

absl::StatusOr<SnapshotHeader> DecodeSnapshotHeader(absl::string_view prefix,
                                                    absl::string_view model_fingerprint,
                                                    absl::Time now) {
  ByteReader r(prefix, kFormat);
  if (absl::StatusOr<uint32_t> version = ReadVersion(r); !version.ok()) return version.status();
  return ReadHeader(r, model_fingerprint, now);
}

int64_t MaxSnapshotBytes(const ModelConfig& config, absl::string_view model_fingerprint,
                         int64_t max_pending_tokens) {
  return static_cast<int64_t>(kMagic.size()) + 4 + 4 + model_fingerprint.size() + 8 * 3 + 8 +
         config.StateFloatsPerSlot() * 4 + 4 + max_pending_tokens * 4 + 4 +
         int64_t{config.vocab_size} * 12 + 1 + 1 + 4 + kMaxSnapshotConstraintTextBytes + 4 +
         kMaxSnapshotMatcherBytes + kSha256Bytes;
}

absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens) {
  return DecodeSnapshot(bytes, config, model_fingerprint, max_pending_tokens, absl::Now());
}

absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens, absl::Time now) {
  ByteReader r(bytes, kFormat);
  const absl::StatusOr<uint32_t> version = ReadVersion(r);
  if (!version.ok()) return version.status();
  r.Unseal();
  if (!r.ok()) return r.status();
  // From here on the bytes are intact but not trusted: a checksum is easy to recompute, so
  // every field is range-checked before anything is sized or computed from it.

  SessionSnapshot snapshot;
  absl::StatusOr<SnapshotHeader> header = ReadHeader(r, model_fingerprint, now);
  if (!header.ok()) return header.status();
  snapshot.create_time = header->create_time;
  snapshot.num_tokens = header->num_tokens;
  snapshot.state.position = header->position;
  const uint64_t state_floats = r.ReadU64("state");
  if (!r.ok()) return r.status();
  if (config.position == PositionEmbedding::kLearned &&
      snapshot.state.position > config.max_position) {
    return Corrupt(absl::StrCat("position: ", snapshot.state.position,
                                " is past the model's learned position table (max_position ",
                                config.max_position, ")"));
  }
  const uint64_t expected_floats = static_cast<uint64_t>(config.StateFloatsPerSlot());
  if (state_floats != expected_floats) {
    return Corrupt(
        absl::StrCat("state: has ", state_floats, " floats, the model needs ", expected_floats));
  }
  r.ReadF32s("state", state_floats, snapshot.state.state);
  if (!r.ok()) return r.status();
  if (absl::Status s = ValidateSessionState(config, snapshot.state.position, snapshot.state.state,
                                            kMaxSnapshotStateMagnitude);
      !s.ok()) {
    return Corrupt(s.message());
  }

  const uint32_t pending_size = r.ReadU32("pending tokens");
  if (!r.ok()) return r.status();
  if (pending_size > max_pending_tokens) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session snapshot: ", pending_size,
        " unprocessed tokens exceed this server's max_prompt_tokens (", max_pending_tokens, ")"));
  }
  r.ReadI32s("pending tokens", pending_size, snapshot.pending);
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < snapshot.pending.size(); ++i) {
    if (snapshot.pending[i] < 0 || snapshot.pending[i] >= config.vocab_size) {
      return Corrupt(absl::StrCat("pending[", i, "]: token id ", snapshot.pending[i],
                                  " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  if (snapshot.num_tokens != snapshot.state.position + static_cast<int64_t>(pending_size)) {
    return Corrupt(absl::StrCat("num_tokens: ", snapshot.num_tokens, " differs from position ",
                                snapshot.state.position, " + ", pending_size, " pending tokens"));
  }

  const uint32_t counts_size = r.ReadU32("token counts");
  if (!r.ok()) return r.status();
  if (counts_size > static_cast<uint32_t>(config.vocab_size)) {
    return Corrupt(absl::StrCat("token_counts: ", counts_size,
                                " entries, more than the vocabulary's ", config.vocab_size));
  }
  snapshot.token_counts.reserve(counts_size);
  int64_t total = 0;
  for (uint32_t i = 0; i < counts_size; ++i) {
    const TokenId token = r.ReadI32("token counts");
    const int64_t count = r.ReadI64("token counts");
    if (!r.ok()) return r.status();
    if (token < 0 || token >= config.vocab_size) {
      return Corrupt(absl::StrCat("token_counts[", i, "].token: token id ", token,
                                  " is outside the vocabulary [0, ", config.vocab_size, ")"));
    }
    if (!snapshot.token_counts.empty() && token <= snapshot.token_counts.back().first) {
      return Corrupt(absl::StrCat("token_counts[", i, "].token: ", token,
                                  " does not ascend (the previous entry is token ",
                                  snapshot.token_counts.back().first, ")"));
    }
    // total <= num_tokens <= kMaxSnapshotTokens, so this cannot overflow.
    if (count < 1 || count > snapshot.num_tokens - total) {
      return Corrupt(absl::StrCat("token_counts[", i, "].count: ", count, " is outside [1, ",
                                  snapshot.num_tokens - total,
                                  "] (num_tokens less the counts before it)"));
    }
    total += count;
    snapshot.token_counts.emplace_back(token, count);
  }
  if (total != snapshot.num_tokens) {
    return Corrupt(absl::StrCat("token_counts: they sum to ", total, ", not num_tokens (",
                                snapshot.num_tokens, ")"));
  }
  if (*version >= 2) {
    absl::StatusOr<std::optional<ConstraintState>> constraint = ReadConstraint(r);
    if (!constraint.ok()) return constraint.status();
    snapshot.constraint = *std::move(constraint);
  }
  if (r.remaining() != 0) {
    return Corrupt(*version >= 2 ? "trailing bytes after the constraint"
                                 : "trailing bytes after the token counts");
  }
  return snapshot;
}

}  // namespace linserve
