// libFuzzer target: snapshot import (server/sessions/snapshot.h), both on raw bytes and, through
// SnapshotBytes, behind a valid checksum. An accepted snapshot's fields agree with each other and
// with the model; one of the current version re-encodes to the same bytes, and one of an older
// version (which has no constraint) re-encodes to a current one that decodes to the same bytes
// again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/sessions/snapshot.h"
#include "tests/fuzz/fuzz_inputs.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

// The version field of bytes that decoded: a little-endian u32 after the 8-byte magic.
uint32_t Version(std::string_view bytes) {
  uint32_t version = 0;
  for (int i = 3; i >= 0; --i) version = version << 8 | static_cast<uint8_t>(bytes[8 + i]);
  return version;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linserve;
  static const ModelConfig config = fuzz::FuzzConfig();
  const std::string bytes =
      fuzz::SnapshotBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  auto snapshot = DecodeSnapshot(bytes, config, fuzz::kFingerprint, fuzz::kMaxPendingTokens);
  if (!snapshot.ok()) return 0;
  Check(static_cast<int64_t>(bytes.size()) <=
        MaxSnapshotBytes(config, fuzz::kFingerprint, fuzz::kMaxPendingTokens));
  Check(static_cast<int64_t>(snapshot->state.state.size()) == config.StateFloatsPerSlot());
  Check(static_cast<int64_t>(snapshot->pending.size()) <= fuzz::kMaxPendingTokens);
  int64_t counted = 0;
  for (const auto& [token, count] : snapshot->token_counts) {
    Check(token >= 0 && token < config.vocab_size && count >= 1);
    counted += count;
  }
  Check(counted == snapshot->num_tokens);
  Check(snapshot->num_tokens ==
        snapshot->state.position + static_cast<int64_t>(snapshot->pending.size()));
  const std::string encoded = EncodeSnapshot(*snapshot, fuzz::kFingerprint);
  if (Version(bytes) == kSnapshotVersion) {
    Check(encoded == bytes);
  } else {
    Check(!snapshot->constraint.has_value());
    auto again = DecodeSnapshot(encoded, config, fuzz::kFingerprint, fuzz::kMaxPendingTokens);
    Check(again.ok() && EncodeSnapshot(*again, fuzz::kFingerprint) == encoded);
  }
  return 0;
}
