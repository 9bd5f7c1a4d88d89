#include "server/prefix/prefix_disk.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "server/storage/sha256.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr absl::string_view kMagic("LSVPREF\x1a", 8);
constexpr absl::string_view kExtension = ".prefix";

template <typename T>
void Append(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Read(absl::string_view& in, T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (in.size() < sizeof(T)) return false;
  std::memcpy(&value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

// magic, owner, tokens, position, floats, then the SHA-256 of all of it.
std::string Encode(absl::string_view owner, absl::Span<const TokenId> tokens,
                   const StateBlob& state) {
  std::string out(kMagic);
  Append<uint32_t>(out, static_cast<uint32_t>(owner.size()));
  out.append(owner.data(), owner.size());
  Append<uint64_t>(out, tokens.size());
  out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(TokenId));
  Append<int64_t>(out, state.position);
  Append<uint64_t>(out, state.state.size());
  out.append(reinterpret_cast<const char*>(state.state.data()), state.state.size() * sizeof(float));
  out.append(Sha256(out));
  return out;
}

// The state, when `bytes` is an intact file of exactly `owner` and `tokens`.
std::optional<StateBlob> Decode(absl::string_view bytes, absl::string_view owner,
                                absl::Span<const TokenId> tokens) {
  if (bytes.size() < kMagic.size() + kSha256Bytes) return std::nullopt;
  absl::string_view body = bytes.substr(0, bytes.size() - kSha256Bytes);
  if (Sha256(body) != bytes.substr(body.size()) || !absl::ConsumePrefix(&body, kMagic)) {
    return std::nullopt;
  }
  uint32_t owner_bytes = 0;
  if (!Read(body, owner_bytes) || body.size() < owner_bytes ||
      body.substr(0, owner_bytes) != owner) {
    return std::nullopt;
  }
  body.remove_prefix(owner_bytes);
  uint64_t token_count = 0;
  if (!Read(body, token_count) || token_count != tokens.size() ||
      body.size() < token_count * sizeof(TokenId) ||
      std::memcmp(body.data(), tokens.data(), token_count * sizeof(TokenId)) != 0) {
    return std::nullopt;
  }
  body.remove_prefix(token_count * sizeof(TokenId));
  StateBlob state;
  uint64_t floats = 0;
  if (!Read(body, state.position) || state.position != static_cast<int64_t>(tokens.size()) ||
      !Read(body, floats) || body.size() != floats * sizeof(float)) {
    return std::nullopt;
  }
  state.state.resize(floats);
  std::memcpy(state.state.data(), body.data(), body.size());
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
  std::optional<StateBlob> state = Decode(*bytes, tenant, tokens);
  if (!state.has_value()) {
    // A torn or corrupt file, or another prefix under a colliding key: a miss.
    spdlog::warn("prefix disk {}: a state file did not hold the prefix looked up; removed",
                 options_.dir);
    return std::nullopt;
  }
  ++reads_;
  return state;
}

}  // namespace linserve
