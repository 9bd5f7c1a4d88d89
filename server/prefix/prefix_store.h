// PrefixStore: recurrent states after token prefixes, content-addressed, so that a request that
// resends a known conversation feeds only its new tokens.
//
// A linear-attention model's whole memory of a prefix is its state (StateBlob), and continuing
// from the state gives what re-reading the prefix would. A checkpoint is the state after
// exactly `tokens` (position == tokens.size()), stored under a key chained token by token from
// a hash of the model fingerprint, the tenant and a per-process random salt. So the key of every
// prefix of a request is O(1) from the previous one, and Lookup finds the longest stored prefix
// ending at any token, not on a grid, in one pass over the request.
//
// Hash collisions cannot change a result: a stored checkpoint keeps its tenant and tokens, and
// Lookup uses it only when they equal the request's (a colliding key is then a miss, and an
// Insert that collides with another key leaves the older checkpoint in place). The salt keeps
// anyone from precomputing colliding token sequences.
//
// Checkpoints are scoped to their tenant: another tenant's identical prompt misses,
// since a hit (its speed, Usage.cached_prompt_tokens) would reveal that someone sent it.
//
// Checkpoints are read-only and copied out (Backend::WriteSlot into the request's own slot), so
// nothing a request does changes one. Memory is bounded by a byte budget, and each tenant's
// checkpoints by tenant_budget_bytes: a tenant over its own budget evicts its own least
// recently used checkpoints first, so that one tenant's prompts cannot push out another's while
// the tenants' budgets add up to at most the whole. Beyond the whole budget the least recently
// used checkpoints of any tenant are evicted first: to the disk tier when there is one
// (prefix_disk.h: a lookup that finds a checkpoint there reads it back into memory), else
// forgotten. The keys of the last kEvictedKeysRemembered checkpoints forgotten (or dropped by the
// disk tier for its budget) are kept, so that a miss can say it was caused by an eviction.
//
// No threads and no locking: the engine thread owns the store.
#ifndef LINSERVE_SERVER_PREFIX_PREFIX_STORE_H_
#define LINSERVE_SERVER_PREFIX_PREFIX_STORE_H_

#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/types.h"
#include "server/metrics/metrics.h"
#include "server/prefix/prefix_disk.h"

namespace linserve {

struct PrefixStoreOptions {
  // Host memory the checkpoints may hold (states, their tokens and bookkeeping); 0 disables
  // prefix reuse and checkpoints. Default: 1 GiB.
  int64_t memory_budget_bytes = int64_t{1} << 30;
  // Host memory one tenant's checkpoints may hold, within memory_budget_bytes. 0: no
  // budget of its own (memory_budget_bytes alone applies). In [0, memory_budget_bytes].
  // Default: 0.
  int64_t tenant_budget_bytes = 0;
  // Prompt tokens between two checkpoints taken inside one long prefill (at absolute positions
  // that are multiples of it); 0 takes them at turn boundaries only. Default: 1024.
  int32_t checkpoint_interval = 1024;
  // Shortest prefix worth a checkpoint: shorter ones are neither stored nor looked up (copying
  // a state in costs about as much as re-reading a few tokens). Default: 32.
  int32_t min_tokens = 32;
  // The disk tier's directory (prefix_disk.h: this server's alone, cleared at start); "" keeps
  // checkpoints in memory only. Default: "".
  std::string disk_dir = "";
  // Bytes the disk tier's files may take. Default: 4 GiB.
  int64_t disk_budget_bytes = int64_t{4} << 30;
};

// Errors are INVALID_ARGUMENT naming the field and its range.
absl::Status ValidatePrefixStoreOptions(const PrefixStoreOptions& options);

// Why a lookup found no usable checkpoint.
enum class PrefixMiss {
  kNoPrefix,  // no checkpoint of the tenant is a prefix of the tokens
  kEvicted,   // one was, but it has been evicted for the memory budget
  kTooShort,  // fewer than min_tokens + 1 tokens, or only a checkpoint covering all of them
};

std::string_view ToString(PrefixMiss miss);

// Where a PrefixStore counts its events (metrics.h); they must outlive the store. nullptr
// counts nothing.
struct PrefixStoreCounters {
  // Checkpoints evicted from memory for the budgets.
  Counter* evictions = nullptr;
  // Checkpoints a lookup read back from the disk tier.
  Counter* disk_reads = nullptr;
};

struct PrefixLookup {
  // Tokens the checkpoint covers (a prefix of the looked-up tokens); 0 on a miss.
  int64_t length = 0;
  // The checkpoint's state (position == length); valid until the next Insert. nullptr on a
  // miss.
  const StateBlob* state = nullptr;
  // Set on a miss.
  std::optional<PrefixMiss> miss;
};

class PrefixStore {
 public:
  // Keys of evicted checkpoints remembered to explain misses.
  static constexpr size_t kEvictedKeysRemembered = 65536;

  // How a key extends by one token. Tests pass a weak one to force collisions.
  using ExtendKey = uint64_t (*)(uint64_t key, TokenId token);

  // `options` must be valid (ValidatePrefixStoreOptions); `model_fingerprint` names the model
  // whose states the store holds. `extend` nullptr: a strong 64-bit mix. `disk` (nullptr: none)
  // is the disk tier, which must outlive the store.
  PrefixStore(const PrefixStoreOptions& options, absl::string_view model_fingerprint,
              ExtendKey extend = nullptr, PrefixDisk* disk = nullptr,
              const PrefixStoreCounters& counters = {});
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  bool enabled() const { return options_.memory_budget_bytes > 0; }
  const PrefixStoreOptions& options() const { return options_; }

  // The longest checkpoint of `tenant` covering a proper prefix of `tokens` of at least
  // min_tokens (at least one token is left to feed, whose logits the caller needs), which
  // becomes the most recently used; one on the disk tier is read back into memory first.
  PrefixLookup Lookup(absl::string_view tenant, absl::Span<const TokenId> tokens);
  // Whether a checkpoint of `tenant` after exactly `tokens` is held; it becomes the most
  // recently used (so a caller can skip reading a state the store already has).
  bool Touch(absl::string_view tenant, absl::Span<const TokenId> tokens);
  // Stores `state`, the state after exactly `tokens` (state.position must equal
  // tokens.size() >= 1), evicting the tenant's least recently used checkpoints to stay within
  // its tenant_budget_bytes, then anyone's to stay within the whole budget. A checkpoint larger
  // than the tenant's budget, shorter than min_tokens or already held is not stored. Returns
  // whether it was stored.
  bool Insert(absl::string_view tenant, absl::Span<const TokenId> tokens, StateBlob state);

  // Host bytes held by the checkpoints, all of them or `tenant`'s.
  int64_t bytes() const { return bytes_; }
  int64_t bytes(absl::string_view tenant) const;
  int64_t size() const { return static_cast<int64_t>(lru_.size()); }
  int64_t evictions() const { return evictions_; }

 private:
  // One tenant's checkpoints: their bytes and keys, most recently used first.
  struct TenantShare {
    int64_t bytes = 0;
    std::list<uint64_t> lru;
  };
  struct Entry {
    uint64_t key = 0;
    std::string tenant;
    std::vector<TokenId> tokens;
    StateBlob state;
    int64_t bytes = 0;
    // Its tenant's share (stable: tenants_ is a node map) and its place in the share's order.
    TenantShare* share = nullptr;
    std::list<uint64_t>::iterator in_share;
  };
  using EntryList = std::list<Entry>;

  // The key of the empty prefix of `tenant`; each token extends it (extend_).
  uint64_t Seed(absl::string_view tenant) const;
  uint64_t KeyOf(absl::string_view tenant, absl::Span<const TokenId> tokens) const;
  // The entry under `key` when it holds exactly (tenant, tokens); lru_.end() otherwise.
  EntryList::iterator Find(uint64_t key, absl::string_view tenant,
                           absl::Span<const TokenId> tokens);
  // Marks the entry as just used.
  void Promote(EntryList::iterator it);
  // Drops the entry from memory (to the disk tier when there is one).
  void Evict(EntryList::iterator victim);
  // A key whose checkpoint is gone, for the miss reasons.
  void RememberEvicted(uint64_t key);

  const PrefixStoreOptions options_;
  const ExtendKey extend_;
  PrefixDisk* const disk_;
  const PrefixStoreCounters counters_;
  uint64_t seed_ = 0;
  // Most recently used first.
  EntryList lru_;
  absl::flat_hash_map<uint64_t, EntryList::iterator> by_key_;
  // Tenants holding checkpoints.
  absl::node_hash_map<std::string, TenantShare> tenants_;
  std::deque<uint64_t> evicted_order_;
  absl::flat_hash_set<uint64_t> evicted_;
  int64_t bytes_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_PREFIX_PREFIX_STORE_H_
