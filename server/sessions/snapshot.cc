#include "server/sessions/snapshot.h"

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "model/format/session_state.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "snapshots are little-endian and written with memcpy");

constexpr absl::string_view kMagic("LSVSNAP\x1a", 8);
constexpr uint32_t kMaxFingerprintBytes = 256;

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutBytes(const void* data, size_t size) {
    if (size > 0) out_.append(static_cast<const char*>(data), size);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  // False (reading nothing) when fewer than sizeof(T) bytes remain.
  template <typename T>
  bool Get(T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // `count` elements of `size` bytes, checked without overflow.
  bool GetArray(void* out, uint64_t count, size_t size) {
    if (count == 0) return true;  // `out` may be null (an empty vector's data())
    if (count > (bytes_.size() - pos_) / size) return false;
    std::memcpy(out, bytes_.data() + pos_, count * size);
    pos_ += count * size;
    return true;
  }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  absl::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("session snapshot: ", what));
}

absl::string_view Abbreviated(absl::string_view fingerprint) { return fingerprint.substr(0, 16); }

// The fields after the version and before the state (see the layout in snapshot.h).
absl::StatusOr<SnapshotHeader> ReadHeader(Reader& r, absl::string_view model_fingerprint,
                                          absl::Time now) {
  uint32_t fingerprint_size = 0;
  if (!r.Get(fingerprint_size) || fingerprint_size > kMaxFingerprintBytes) {
    return Corrupt("bad model fingerprint length");
  }
  std::string fingerprint(fingerprint_size, '\0');
  if (!r.GetArray(fingerprint.data(), fingerprint_size, 1)) return Corrupt("truncated");
  if (fingerprint != model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot: made by model ", Abbreviated(fingerprint),
                     "... but this server runs model ", Abbreviated(model_fingerprint),
                     "...; a session only continues on the model that produced it"));
  }
  SnapshotHeader header;
  int64_t create_micros = 0;
  if (!r.Get(create_micros) || !r.Get(header.num_tokens) || !r.Get(header.position)) {
    return Corrupt("truncated");
  }
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
  Writer w;
  w.PutBytes(kMagic.data(), kMagic.size());
  w.Put<uint32_t>(kSnapshotVersion);
  w.Put<uint32_t>(static_cast<uint32_t>(model_fingerprint.size()));
  w.PutBytes(model_fingerprint.data(), model_fingerprint.size());
  w.Put<int64_t>(absl::ToUnixMicros(snapshot.create_time));
  w.Put<int64_t>(snapshot.num_tokens);
  w.Put<int64_t>(snapshot.state.position);
  w.Put<uint64_t>(snapshot.state.state.size());
  w.PutBytes(snapshot.state.state.data(), snapshot.state.state.size() * sizeof(float));
  w.Put<uint32_t>(static_cast<uint32_t>(snapshot.pending.size()));
  w.PutBytes(snapshot.pending.data(), snapshot.pending.size() * sizeof(TokenId));
  w.Put<uint32_t>(static_cast<uint32_t>(snapshot.token_counts.size()));
  for (const auto& [token, count] : snapshot.token_counts) {
    w.Put<TokenId>(token);
    w.Put<int64_t>(count);
  }
  w.out().append(Sha256(w.out()));
  return std::move(w.out());
}

absl::StatusOr<SnapshotHeader> DecodeSnapshotHeader(absl::string_view prefix,
                                                    absl::string_view model_fingerprint,
                                                    absl::Time now) {
  if (prefix.size() < kMagic.size() + 4 || prefix.substr(0, kMagic.size()) != kMagic) {
    return Corrupt("not a linserve session snapshot (bad magic)");
  }
  uint32_t version = 0;
  std::memcpy(&version, prefix.data() + kMagic.size(), sizeof(version));
  if (version != kSnapshotVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot: format version ", version,
                     " is not supported (this server reads version ", kSnapshotVersion, ")"));
  }
  Reader r(prefix.substr(kMagic.size() + 4));
  return ReadHeader(r, model_fingerprint, now);
}

int64_t MaxSnapshotBytes(const ModelConfig& config, absl::string_view model_fingerprint,
                         int64_t max_pending_tokens) {
  return static_cast<int64_t>(kMagic.size()) + 4 + 4 + model_fingerprint.size() + 8 * 3 + 8 +
         config.StateFloatsPerSlot() * 4 + 4 + max_pending_tokens * 4 + 4 +
         int64_t{config.vocab_size} * 12 + kSha256Bytes;
}

absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens) {
  return DecodeSnapshot(bytes, config, model_fingerprint, max_pending_tokens, absl::Now());
}

absl::StatusOr<SessionSnapshot> DecodeSnapshot(absl::string_view bytes, const ModelConfig& config,
                                               absl::string_view model_fingerprint,
                                               int64_t max_pending_tokens, absl::Time now) {
  if (bytes.size() < kMagic.size() + 4 || bytes.substr(0, kMagic.size()) != kMagic) {
    return Corrupt("not a linserve session snapshot (bad magic)");
  }
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + kMagic.size(), sizeof(version));
  if (version != kSnapshotVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("session snapshot: format version ", version,
                     " is not supported (this server reads version ", kSnapshotVersion, ")"));
  }
  if (bytes.size() < kMagic.size() + 4 + kSha256Bytes) return Corrupt("truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - kSha256Bytes);
  if (Sha256(body) != bytes.substr(body.size())) {
    return Corrupt("SHA-256 checksum mismatch (the bytes were corrupted or truncated)");
  }
  // From here on the bytes are intact but not trusted: a checksum is easy to recompute, so
  // every field is range-checked before anything is sized or computed from it.

  Reader r(body.substr(kMagic.size() + 4));
  SessionSnapshot snapshot;
  absl::StatusOr<SnapshotHeader> header = ReadHeader(r, model_fingerprint, now);
  if (!header.ok()) return header.status();
  snapshot.create_time = header->create_time;
  snapshot.num_tokens = header->num_tokens;
  snapshot.state.position = header->position;
  uint64_t state_floats = 0;
  if (!r.Get(state_floats)) return Corrupt("truncated");
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
  snapshot.state.state.resize(state_floats);
  if (!r.GetArray(snapshot.state.state.data(), state_floats, sizeof(float))) {
    return Corrupt("truncated state");
  }
  if (absl::Status s = ValidateSessionState(config, snapshot.state.position, snapshot.state.state,
                                            kMaxSnapshotStateMagnitude);
      !s.ok()) {
    return Corrupt(s.message());
  }

  uint32_t pending_size = 0;
  if (!r.Get(pending_size)) return Corrupt("truncated");
  if (pending_size > max_pending_tokens) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session snapshot: ", pending_size,
        " unprocessed tokens exceed this server's max_prompt_tokens (", max_pending_tokens, ")"));
  }
  snapshot.pending.resize(pending_size);
  if (!r.GetArray(snapshot.pending.data(), pending_size, sizeof(TokenId))) {
    return Corrupt("truncated pending tokens");
  }
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

  uint32_t counts_size = 0;
  if (!r.Get(counts_size)) return Corrupt("truncated");
  if (counts_size > static_cast<uint32_t>(config.vocab_size)) {
    return Corrupt(absl::StrCat("token_counts: ", counts_size,
                                " entries, more than the vocabulary's ", config.vocab_size));
  }
  snapshot.token_counts.reserve(counts_size);
  int64_t total = 0;
  for (uint32_t i = 0; i < counts_size; ++i) {
    TokenId token = 0;
    int64_t count = 0;
    if (!r.Get(token) || !r.Get(count)) return Corrupt("truncated token counts");
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
  if (r.remaining() != 0) return Corrupt("trailing bytes after the token counts");
  if (total != snapshot.num_tokens) {
    return Corrupt(absl::StrCat("token_counts: they sum to ", total, ", not num_tokens (",
                                snapshot.num_tokens, ")"));
  }
  return snapshot;
}

}  // namespace linserve
