// PrefixDisk: the disk tier of the prefix store (prefix_store.h). The states the store evicts
// from host memory for its budget are written here, one file each, and a lookup that finds one
// reads it back into memory (the file is removed: the state has moved). The directory holds at
// most a byte budget; the least recently written files are dropped first.
//
// A cache, not state: a file is named by the store's key, which is salted per process, so
// Open clears the directory of an earlier process's files, and nothing is fsynced. A file is
// trusted only whole: its SHA-256 must match, and it must hold the tenant and tokens looked up
// (a hash collision, a torn write or a corrupt file is a miss, and the file is removed).
//
// No threads and no locking: the engine thread owns it (through the store).
#ifndef LINSERVE_SERVER_PREFIX_PREFIX_DISK_H_
#define LINSERVE_SERVER_PREFIX_PREFIX_DISK_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/types.h"
#include "server/storage/file_system.h"

namespace linserve {

struct PrefixDiskOptions {
  // The directory, used by this server alone; created when missing.
  std::string dir;
  // Bytes the files may take in all (>= 1).
  int64_t budget_bytes = int64_t{4} << 30;
  // nullptr: DefaultFileSystem().
  FileSystem* file_system = nullptr;
};

class PrefixDisk {
 public:
  // Creates the directory and removes the prefix files an earlier process left in it.
  // FAILED_PRECONDITION naming the directory when it cannot be created, listed or cleared;
  // INVALID_ARGUMENT for a budget below 1.
  static absl::StatusOr<std::unique_ptr<PrefixDisk>> Open(const PrefixDiskOptions& options);

  // Writes `state`, the state after `tokens` of `tenant`, under `key` (replacing a file under
  // the same key), dropping the least recently written files to stay within the budget; the
  // keys of dropped files are appended to `dropped`. Returns whether the state was written
  // (false when it is larger than the whole budget or the write failed, which is logged).
  bool Put(uint64_t key, absl::string_view tenant, absl::Span<const TokenId> tokens,
           const StateBlob& state, std::vector<uint64_t>& dropped);
  // Whether a file of `tenant`'s prefix of `length` tokens is held under `key` (no I/O).
  bool Holds(uint64_t key, absl::string_view tenant, size_t length) const;
  // Reads the state under `key` and removes its file. nullopt when the file cannot be read,
  // fails its checksum or does not hold exactly `tenant` and `tokens` (logged; the file is
  // removed all the same).
  std::optional<StateBlob> Take(uint64_t key, absl::string_view tenant,
                                absl::Span<const TokenId> tokens);

  int64_t bytes() const { return bytes_; }
  int64_t size() const { return static_cast<int64_t>(lru_.size()); }
  // States read back into memory since Open.
  int64_t reads() const { return reads_; }

 private:
  struct Entry {
    uint64_t key = 0;
    std::string tenant;
    size_t length = 0;
    int64_t bytes = 0;
  };
  using EntryList = std::list<Entry>;

  PrefixDisk(const PrefixDiskOptions& options, FileSystem& fs);
  std::string PathOf(uint64_t key) const;
  // Removes the entry and its file.
  void Drop(EntryList::iterator it);

  const PrefixDiskOptions options_;
  FileSystem& fs_;
  // Least recently written last.
  EntryList lru_;
  absl::flat_hash_map<uint64_t, EntryList::iterator> by_key_;
  int64_t bytes_ = 0;
  int64_t reads_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_PREFIX_PREFIX_DISK_H_
