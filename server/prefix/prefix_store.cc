#include "server/prefix/prefix_store.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

// MurmurHash3's 64-bit finalizer: every input bit affects every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t StrongExtend(uint64_t key, TokenId token) {
  return Mix(key +
             0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1));
}

// Bookkeeping charged per checkpoint beside its floats and tokens (list node, map slot, tenant).
constexpr int64_t kEntryOverheadBytes = 128;

}  // namespace

absl::Status ValidatePrefixStoreOptions(const PrefixStoreOptions& options) {
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix cache memory budget must be >= 0 bytes (0 disables it), got ",
                     options.memory_budget_bytes));
  }
  if (options.tenant_budget_bytes < 0 ||
      options.tenant_budget_bytes > options.memory_budget_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix cache tenant budget must be in [0, the memory budget = ",
                     options.memory_budget_bytes, "] bytes (0: the memory budget alone), got ",
                     options.tenant_budget_bytes));
  }
  if (options.checkpoint_interval < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix checkpoint interval must be >= 0 tokens (0: turn boundaries only), got ",
        options.checkpoint_interval));
  }
  if (options.min_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix min tokens must be >= 1, got ", options.min_tokens));
  }
  if (!options.disk_dir.empty() && options.disk_budget_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix disk budget must be >= 1 byte with a disk directory, got ",
                     options.disk_budget_bytes));
  }
  return absl::OkStatus();
}

std::string_view ToString(PrefixMiss miss) {
  switch (miss) {
    case PrefixMiss::kNoPrefix:
      return "no_prefix";
    case PrefixMiss::kEvicted:
      return "evicted";
    case PrefixMiss::kTooShort:
      return "too_short";
  }
  return "unknown";
}

PrefixStore::PrefixStore(const PrefixStoreOptions& options, absl::string_view model_fingerprint,
                         ExtendKey extend, PrefixDisk* disk, const PrefixStoreCounters& counters)
    : options_(options),
      extend_(extend != nullptr ? extend : &StrongExtend),
      disk_(disk),
      counters_(counters) {
  std::random_device random;
  const uint64_t salt = (uint64_t{random()} << 32) ^ random();
  seed_ = Mix(salt ^ absl::HashOf(model_fingerprint));
}

uint64_t PrefixStore::Seed(absl::string_view tenant) const {
  return Mix(seed_ ^ absl::HashOf(tenant));
}

uint64_t PrefixStore::KeyOf(absl::string_view tenant, absl::Span<const TokenId> tokens) const {
  uint64_t key = Seed(tenant);
  for (TokenId token : tokens) key = extend_(key, token);
  return key;
}

PrefixStore::EntryList::iterator PrefixStore::Find(uint64_t key, absl::string_view tenant,
                                                   absl::Span<const TokenId> tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return lru_.end();
  const Entry& entry = *it->second;
  if (entry.tenant != tenant ||
      !std::equal(entry.tokens.begin(), entry.tokens.end(), tokens.begin(), tokens.end())) {
    return lru_.end();  // a hash collision: another prefix holds this key
  }
  return it->second;
}

PrefixLookup PrefixStore::Lookup(absl::string_view tenant, absl::Span<const TokenId> tokens) {
  PrefixLookup result;
  if (!enabled()) {
    result.miss = PrefixMiss::kNoPrefix;
    return result;
  }
  // keys[i] is the key of tokens[0, i + 1).
  std::vector<uint64_t> keys(tokens.size());
  uint64_t key = Seed(tenant);
  for (size_t i = 0; i < tokens.size(); ++i) keys[i] = key = extend_(key, tokens[i]);
  // Usable lengths leave a token to feed: min_tokens .. size - 1.
  const size_t shortest = static_cast<size_t>(options_.min_tokens);
  for (size_t length = tokens.size() > 0 ? tokens.size() - 1 : 0; length >= shortest; --length) {
    const absl::Span<const TokenId> prefix = tokens.subspan(0, length);
    auto it = Find(keys[length - 1], tenant, prefix);
    if (it == lru_.end() && disk_ != nullptr && disk_->Holds(keys[length - 1], tenant, length)) {
      std::optional<StateBlob> state = disk_->Take(keys[length - 1], tenant, prefix);
      if (state.has_value()) Increment(counters_.disk_reads);
      if (state.has_value() && Insert(tenant, prefix, *std::move(state))) it = lru_.begin();
    }
    if (it == lru_.end()) continue;
    Promote(it);
    result.length = static_cast<int64_t>(length);
    result.state = &it->state;
    return result;
  }
  if (!tokens.empty() && Find(keys.back(), tenant, tokens) != lru_.end()) {
    result.miss = PrefixMiss::kTooShort;
  } else if (tokens.size() <= shortest) {
    result.miss = PrefixMiss::kTooShort;
  } else if (std::any_of(keys.begin(), keys.end(),
                         [this](uint64_t k) { return evicted_.contains(k); })) {
    result.miss = PrefixMiss::kEvicted;
  } else {
    result.miss = PrefixMiss::kNoPrefix;
  }
  return result;
}

bool PrefixStore::Touch(absl::string_view tenant, absl::Span<const TokenId> tokens) {
  if (!enabled()) return false;
  auto it = Find(KeyOf(tenant, tokens), tenant, tokens);
  if (it == lru_.end()) return false;
  Promote(it);
  return true;
}

void PrefixStore::Promote(EntryList::iterator it) {
  lru_.splice(lru_.begin(), lru_, it);
  std::list<uint64_t>& mine = it->share->lru;
  mine.splice(mine.begin(), mine, it->in_share);
}

int64_t PrefixStore::bytes(absl::string_view tenant) const {
  auto share = tenants_.find(tenant);
  return share == tenants_.end() ? 0 : share->second.bytes;
}

bool PrefixStore::Insert(absl::string_view tenant, absl::Span<const TokenId> tokens,
                         StateBlob state) {
  if (!enabled() || tokens.size() < static_cast<size_t>(options_.min_tokens) ||
      state.position != static_cast<int64_t>(tokens.size())) {
    return false;
  }
  const uint64_t key = KeyOf(tenant, tokens);
  if (by_key_.contains(key)) return false;  // held already, or a collision: keep the older one
  const int64_t bytes = static_cast<int64_t>(state.state.size() * sizeof(float) +
                                             tokens.size() * sizeof(TokenId) + tenant.size()) +
                        kEntryOverheadBytes;
  const int64_t tenant_budget = options_.tenant_budget_bytes > 0 ? options_.tenant_budget_bytes
                                                                 : options_.memory_budget_bytes;
  if (bytes > tenant_budget) return false;
  // The tenant's own oldest go first; an eviction that empties a share removes it.
  for (auto share = tenants_.find(tenant);
       share != tenants_.end() && share->second.bytes + bytes > tenant_budget;
       share = tenants_.find(tenant)) {
    Evict(by_key_.at(share->second.lru.back()));
  }
  while (bytes_ + bytes > options_.memory_budget_bytes) Evict(std::prev(lru_.end()));
  TenantShare& share = tenants_[tenant];
  share.lru.push_front(key);
  share.bytes += bytes;
  lru_.push_front(Entry{.key = key,
                        .tenant = std::string(tenant),
                        .tokens = std::vector<TokenId>(tokens.begin(), tokens.end()),
                        .state = std::move(state),
                        .bytes = bytes,
                        .share = &share,
                        .in_share = share.lru.begin()});
  by_key_[key] = lru_.begin();
  bytes_ += bytes;
  evicted_.erase(key);
  return true;
}

void PrefixStore::Evict(EntryList::iterator victim) {
  by_key_.erase(victim->key);
  bytes_ -= victim->bytes;
  TenantShare& share = *victim->share;
  share.bytes -= victim->bytes;
  share.lru.erase(victim->in_share);
  if (share.lru.empty()) tenants_.erase(victim->tenant);
  std::vector<uint64_t> dropped;
  if (disk_ == nullptr ||
      !disk_->Put(victim->key, victim->tenant, victim->tokens, victim->state, dropped)) {
    RememberEvicted(victim->key);
  }
  for (uint64_t key : dropped) RememberEvicted(key);
  lru_.erase(victim);
  ++evictions_;
  Increment(counters_.evictions);
}

void PrefixStore::RememberEvicted(uint64_t key) {
  if (!evicted_.insert(key).second) return;
  evicted_order_.push_back(key);
  if (evicted_order_.size() > kEvictedKeysRemembered) {
    evicted_.erase(evicted_order_.front());
    evicted_order_.pop_front();
  }
}

}  // namespace linserve
