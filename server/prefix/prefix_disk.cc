#include "server/prefix/prefix_disk.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/storage/byte_codec.h"
#include "server/storage/sha256.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr absl::string_view kMagic("LSVPREF\x1a", 8);
constexpr absl::string_view kFormat = "prefix state";
constexpr absl::string_view kExtension = ".prefix";

// Why a file is a miss.
absl::Status Miss(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(kFormat, ": ", what));
}

// magic | u32 n + n bytes: tenant | u64 n + n i32: tokens | i64 position | u64 n + n f32: state |
// SHA-256 of everything before (little-endian, server/storage/byte_codec.h).
std::string Encode(absl::string_view tenant, absl::Span<const TokenId> tokens,
                   const StateBlob& state) {
  ByteWriter w(kMagic, kMagic.size() + 4 + tenant.size() + 8 + tokens.size() * sizeof(TokenId) +
                           8 + 8 + state.state.size() * sizeof(float) + kSha256Bytes);
  w.PutString32(tenant);
  w.PutU64(tokens.size());
  w.PutI32s(tokens);
  w.PutI64(state.position);
  w.PutU64(state.state.size());
  w.PutF32s(state.state);
  return std::move(w).Seal();
}

// The state, when `bytes` is an intact file of exactly `tenant` and `tokens`.
absl::StatusOr<StateBlob> Decode(absl::string_view bytes, absl::string_view tenant,
                                 absl::Span<const TokenId> tokens) {
  ByteReader r(bytes, kFormat);
  r.ExpectMagic(kMagic);
  r.Unseal();
  // No limit but the file's size: this process wrote the tenant's name.
  const absl::string_view file_tenant =
      r.ReadString32("tenant", std::numeric_limits<uint32_t>::max());
  const uint64_t token_count = r.ReadU64("tokens");
  if (!r.ok()) return r.status();
  if (file_tenant != tenant) return Miss("another tenant's prefix (a colliding key)");
  if (token_count != tokens.size()) return Miss("another prefix's length (a colliding key)");
  std::vector<TokenId> file_tokens;
  r.ReadI32s("tokens", token_count, file_tokens);
  StateBlob state;
  state.position = r.ReadI64("position");
  const uint64_t floats = r.ReadU64("state");
  if (!r.ok()) return r.status();
  if (!std::equal(file_tokens.begin(), file_tokens.end(), tokens.begin())) {
    return Miss("another prefix's tokens (a colliding key)");
  }
  if (state.position != static_cast<int64_t>(tokens.size())) {
    return Miss(absl::StrCat("position: ", state.position, " is not the prefix's length ",
                                 tokens.size()));
  }
  r.ReadF32s("state", floats, state.state);
  if (!r.ok()) return r.status();
  if (r.remaining() != 0) return Miss("trailing bytes after the state");
  return state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixDisk>> PrefixDisk::Open(const PrefixDiskOptions& options) {
  if (options.budget_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix disk budget must be >= 1 byte, got ", options.budget_bytes));
  }
  FileSystem& fs = options.file_system != nullptr ? *options.file_system : DefaultFileSystem();
  auto unusable = [&](const absl::Status& status) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefix disk directory ", options.dir, " is unusable: ", status.message()));
  };
  if (absl::Status s = fs.CreateDirectories(options.dir); !s.ok()) return unusable(s);
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(options.dir);
  if (!names.ok()) return unusable(names.status());
  int removed = 0;
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kExtension)) continue;
    if (absl::Status s = fs.RemoveFile(absl::StrCat(options.dir, "/", name)); !s.ok()) {
      return unusable(s);
    }
    ++removed;
  }
  if (removed > 0) {
    spdlog::info("prefix disk {}: removed {} states of an earlier process", options.dir, removed);
  }
  return std::unique_ptr<PrefixDisk>(new PrefixDisk(options, fs));
}

PrefixDisk::PrefixDisk(const PrefixDiskOptions& options, FileSystem& fs)
    : options_(options), fs_(fs) {}

std::string PrefixDisk::PathOf(uint64_t key) const {
  return absl::StrFormat("%s/%016x%s", options_.dir, key, kExtension);
}

void PrefixDisk::Drop(EntryList::iterator it) {
  if (absl::Status s = fs_.RemoveFile(PathOf(it->key)); !s.ok() && !absl::IsNotFound(s)) {
    spdlog::warn("prefix disk {}: {}", options_.dir, s.ToString());
  }
  bytes_ -= it->bytes;
  by_key_.erase(it->key);
  lru_.erase(it);
}

bool PrefixDisk::Put(uint64_t key, absl::string_view tenant, absl::Span<const TokenId> tokens,
                     const StateBlob& state, std::vector<uint64_t>& dropped) {
  if (auto held = by_key_.find(key); held != by_key_.end()) Drop(held->second);
  const std::string bytes = Encode(tenant, tokens, state);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size > options_.budget_bytes) return false;
  while (bytes_ + size > options_.budget_bytes) {
    dropped.push_back(lru_.back().key);
    Drop(std::prev(lru_.end()));
  }
  if (absl::Status s = fs_.WriteFileDurably(PathOf(key), bytes); !s.ok()) {
    spdlog::warn("prefix disk {}: a state not written: {}", options_.dir, s.ToString());
    fs_.RemoveFile(PathOf(key)).IgnoreError();
    return false;
  }
  lru_.push_front(
      Entry{.key = key, .tenant = std::string(tenant), .length = tokens.size(), .bytes = size});
  by_key_[key] = lru_.begin();
  bytes_ += size;
  return true;
}

bool PrefixDisk::Holds(uint64_t key, absl::string_view tenant, size_t length) const {
  auto it = by_key_.find(key);
  return it != by_key_.end() && it->second->tenant == tenant && it->second->length == length;
}

std::optional<StateBlob> PrefixDisk::Take(uint64_t key, absl::string_view tenant,
                                          absl::Span<const TokenId> tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  absl::StatusOr<std::string> bytes = fs_.ReadFile(PathOf(key));
  Drop(it->second);
  if (!bytes.ok()) {
    spdlog::warn("prefix disk {}: {}", options_.dir, bytes.status().ToString());
    return std::nullopt;
  }
  absl::StatusOr<StateBlob> state = Decode(*bytes, tenant, tokens);
  if (!state.ok()) {
    // A torn or corrupt file, or another prefix under a colliding key: a miss.
    spdlog::warn("prefix disk {}: a state file did not hold the prefix looked up ({}); removed",
                 options_.dir, state.status().ToString());
    return std::nullopt;
  }
  ++reads_;
  return *std::move(state);
}

}  // namespace linserve
