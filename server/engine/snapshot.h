// Session snapshots: the byte format of ExportSession / ImportSession and of the files in
// --state_dir.
//
// Layout (version 1, little-endian):
//   magic "LSVSNAP\x1a" | u32 version | u32 n + n bytes: model fingerprint (hex SHA-256 of the
//   model files) | i64 create_time (µs since the Unix epoch) | i64 num_tokens | i64 position |
//   u64 n + n f32: the StateBlob | u32 n + n i32: pending tokens | u32 n + n (i32 token,
//   i64 count): token counts, ascending by token | 32 bytes: SHA-256 of everything before.
//
// Besides the recurrent state a snapshot carries what makes a continuation identical to one
// long request: the tokens already sent to the client but not yet fed to the model (the last
// sampled token, or the rest of a prompt whose request was cancelled) and how often each token
// occurred in the session (the repetition / presence / frequency penalties count the whole
// session). num_tokens == position + |pending| == the sum of the counts.
#ifndef LINSERVE_SERVER_ENGINE_SNAPSHOT_H_
#define LINSERVE_SERVER_ENGINE_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/types.h"

namespace linserve {

inline constexpr uint32_t kSnapshotVersion = 1;

struct SessionSnapshot {
  StateBlob state;
  std::vector<TokenId> pending;
  // Ascending by token; every count >= 1.
  std::vector<std::pair<TokenId, int64_t>> token_counts;
  int64_t num_tokens = 0;
  absl::Time create_time = absl::UnixEpoch();
};

// Serialises `snapshot`, binding it to the model whose fingerprint is given.
std::string EncodeSnapshot(const SessionSnapshot& snapshot, absl::string_view model_fingerprint);

// Parses and checks a snapshot for the model described by (config, fingerprint). Errors:
// INVALID_ARGUMENT for bytes that are not an intact snapshot (bad magic, checksum mismatch,
// truncation, inconsistent fields: the message says which), FAILED_PRECONDITION for an intact
// snapshot this server cannot use (another format version, another model's fingerprint, more
// than `max_pending_tokens` pending tokens).
absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens);

// The largest snapshot DecodeSnapshot can accept for this model: a bound for receivers that
// accumulate a streamed snapshot.
int64_t MaxSnapshotBytes(const ModelConfig& config, absl::string_view model_fingerprint,
                         int64_t max_pending_tokens);

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SNAPSHOT_H_
