// Session snapshots: the byte format of ExportSession / ImportSession and of the files in
// --state_dir.
//
// Layout (version 2, little-endian, server/storage/byte_codec.h):
//   magic "LSVSNAP\x1a" | u32 version | u32 n + n bytes: model fingerprint (hex SHA-256 of the
//   model files) | i64 create_time (µs since the Unix epoch) | i64 num_tokens | i64 position |
//   u64 n + n f32: the StateBlob | u32 n + n i32: pending tokens | u32 n + n (i32 token,
//   i64 count): token counts, ascending by token | u8 has_constraint (0 or 1), then when 1:
//   u8 kind (ConstraintKind) | u32 n + n bytes: the constraint's text | u32 n + n bytes: its
//   matcher (GrammarMatcher::Serialize) | 32 bytes: SHA-256 of everything before.
// Version 1 is the same without has_constraint and what follows it; it still decodes (a session
// without a constraint).
//
// Besides the recurrent state a snapshot carries what makes a continuation identical to one
// long request: the tokens already sent to the client but not yet fed to the model (the last
// sampled token, or the rest of a prompt whose request was cancelled) and how often each token
// occurred in the session (the repetition / presence / frequency penalties count the whole
// session). num_tokens == position + |pending| == the sum of the counts. With a constraint
// (structured output) it carries the constrained document's position too, so that a session
// exported mid-document continues it.
//
// The checksum only detects accidents: anyone can recompute it. So every field of an intact
// snapshot is also range-checked before the server uses it (see DecodeSnapshot).
#ifndef LINSERVE_SERVER_SESSIONS_SNAPSHOT_H_
#define LINSERVE_SERVER_SESSIONS_SNAPSHOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/format/config.h"
#include "model/types.h"
#include "server/constraints/constraint_spec.h"

namespace linserve {

// The version EncodeSnapshot writes; DecodeSnapshot reads it and every earlier one.
inline constexpr uint32_t kSnapshotVersion = 2;
// The longest constraint text a snapshot may carry: the largest ConstraintLimits::max_text_bytes
// (16 MiB).
inline constexpr uint32_t kMaxSnapshotConstraintTextBytes = uint32_t{1} << 24;
// The longest serialized matcher a snapshot may carry (16 MiB).
inline constexpr uint32_t kMaxSnapshotMatcherBytes = uint32_t{1} << 24;

// Largest magnitude of a state value a snapshot may carry. fp32 accumulation bounds what a real
// session can reach whatever its length: a sum stops growing once it exceeds 2^25 times the
// term added, so |S| <= 2^25 * max|φ(k) v| (z likewise with max φ(k)); even with terms of 1e6
// (|φ(k)|, |v| ~ 1e3, far beyond LayerNorm'd activations) and a 64-token chunk summed before
// it is added, that is 2^31 * 1e6 ~ 2e15. 1e18 leaves 500x on top, and keeps the next step
// finite: φ(q)ᵀS over even 2^16 features with |φ(q)| up to 1e12 stays below 1e35 < FLT_MAX.
inline constexpr float kMaxSnapshotStateMagnitude = 1e18f;
// Largest num_tokens a snapshot may carry: 2^40 (35 years of one session at 1000 tokens/s),
// far enough from INT64_MAX that a session's counts cannot overflow.
inline constexpr int64_t kMaxSnapshotTokens = int64_t{1} << 40;
// How far create_time may lie in the future: clock skew between the server that exported a
// snapshot and the one importing it.
inline constexpr absl::Duration kMaxSnapshotClockSkew = absl::Minutes(5);

struct SessionSnapshot {
  StateBlob state;
  std::vector<TokenId> pending;
  // Ascending by token; every count >= 1.
  std::vector<std::pair<TokenId, int64_t>> token_counts;
  int64_t num_tokens = 0;
  absl::Time create_time = absl::UnixEpoch();
  // The session's constrained document, when its last request had a constraint.
  std::optional<ConstraintState> constraint;
};

// Serialises `snapshot`, binding it to the model whose fingerprint is given.
std::string EncodeSnapshot(const SessionSnapshot& snapshot, absl::string_view model_fingerprint);

// Parses and checks a snapshot for the model described by (config, fingerprint), at time
// `now`. After the checksum every field is range-checked: state values finite, at most
// kMaxSnapshotStateMagnitude in magnitude and z (the normaliser, a sum of non-negative
// features) not negative; num_tokens in [0, kMaxSnapshotTokens]; position at most the learned
// position table (for such models); token ids inside the vocabulary; token counts ascending
// by token, each >= 1; num_tokens == position + |pending| == the sum of the counts;
// create_time neither before the Unix epoch nor more than kMaxSnapshotClockSkew after `now`;
// has_constraint 0 or 1, a constraint's kind one of ConstraintKind's, its text and matcher within
// kMaxSnapshotConstraintTextBytes and kMaxSnapshotMatcherBytes. The matcher bytes themselves are
// checked against the constraint's grammar by the engine (GrammarMatcher::Deserialize), which
// compiles the constraint.
// Errors: INVALID_ARGUMENT for bytes that are not an intact, in-range snapshot (bad magic,
// checksum mismatch, truncation, a field out of range: the message names the field, as
// in SessionSnapshot), FAILED_PRECONDITION for an intact snapshot this server cannot use
// (another format version, another model's fingerprint, more than `max_pending_tokens`
// pending tokens).
absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens, absl::Time now);
// The same at absl::Now().
absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens);

// The fields of a snapshot before its state.
struct SnapshotHeader {
  absl::Time create_time = absl::UnixEpoch();
  int64_t num_tokens = 0;
  int64_t position = 0;
};
// The most bytes DecodeSnapshotHeader needs from the start of a snapshot.
inline constexpr size_t kMaxSnapshotHeaderBytes = 8 + 4 + 4 + 256 + 3 * 8;

// Reads and range-checks the header from the first bytes of a snapshot, for a server that
// indexes snapshots and decodes each one whole (with its checksum) only when it is used. The
// same errors as DecodeSnapshot for the fields it reads; the checksum is not checked.
absl::StatusOr<SnapshotHeader> DecodeSnapshotHeader(absl::string_view prefix,
                                                    absl::string_view model_fingerprint,
                                                    absl::Time now);

// The largest snapshot DecodeSnapshot can accept for this model: a bound for receivers that
// accumulate a streamed snapshot.
int64_t MaxSnapshotBytes(const ModelConfig& config, absl::string_view model_fingerprint,
                         int64_t max_pending_tokens);

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SNAPSHOT_H_
