// The prefix store's disk tier: checkpoints evicted from memory are written to disk and come back
// exactly on lookup; the disk budget drops the oldest (a miss then says "evicted"); corrupt or
// foreign files are misses; tenants stay apart; Open clears an earlier process's files.
#include "server/prefix/prefix_disk.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prefix_test_util.h"
#include "server/prefix/prefix_store.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

// What a checkpoint of 9 tokens costs in memory (state, tokens, bookkeeping, and up to 16 bytes
// of owner name), and on disk (with no owner name).
constexpr int64_t kMemoryBytes = 4000 + 9 * 4 + 128 + 16;
constexpr int64_t kFileBytes = 8 + 4 + 8 + 9 * 4 + 8 + 8 + 4000 + 32;

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// A store holding one checkpoint in memory, over a disk tier holding `files` of them.
struct Tiers {
  Tiers(const std::string& dir, int64_t files)
      : disk(*PrefixDisk::Open({.dir = dir, .budget_bytes = files * kFileBytes})),
        store({.memory_budget_bytes = kMemoryBytes, .checkpoint_interval = 0, .min_tokens = 1},
              "model-a", /*extend=*/nullptr, disk.get()) {}
  std::unique_ptr<PrefixDisk> disk;
  PrefixStore store;
};

TEST(PrefixDiskTest, CheckpointsEvictedFromMemoryComeBackFromDiskExactly) {
  ScopedTempDir dir;
  Tiers t(dir.path(), 3);
  const std::vector<TokenId> a = Range(100, 10), b = Range(200, 10), c = Range(300, 10);
  for (const auto* tokens : {&a, &b, &c}) {
    ASSERT_TRUE(t.store.Insert("", Head(*tokens, 9), StateAfter(Head(*tokens, 9))));
  }
  EXPECT_EQ(t.store.size(), 1);
  EXPECT_EQ(t.disk->size(), 2);
  EXPECT_EQ(t.disk->bytes(), 2 * kFileBytes);
  EXPECT_EQ(Files(dir.path()).size(), 2u);

  const PrefixLookup hit = t.store.Lookup("", a);
  ASSERT_NE(hit.state, nullptr);
  EXPECT_EQ(hit.length, 9);
  EXPECT_EQ(hit.state->position, 9);
  EXPECT_EQ(hit.state->state, StateAfter(Head(a, 9)).state);
  EXPECT_EQ(t.disk->reads(), 1);
  // a moved to memory; c took its place on disk.
  EXPECT_EQ(t.disk->size(), 2);
  EXPECT_EQ(t.store.Lookup("", b).length, 9);
  EXPECT_EQ(t.store.Lookup("", c).length, 9);
  EXPECT_EQ(t.disk->reads(), 3);
  EXPECT_EQ(t.store.Lookup("", Range(400, 10)).miss, PrefixMiss::kNoPrefix);
}

TEST(PrefixDiskTest, TheDiskBudgetDropsTheOldestAndAMissSaysEvicted) {
  ScopedTempDir dir;
  Tiers t(dir.path(), 1);
  const std::vector<TokenId> a = Range(100, 10), b = Range(200, 10), c = Range(300, 10);
  for (const auto* tokens : {&a, &b, &c}) {
    t.store.Insert("", Head(*tokens, 9), StateAfter(Head(*tokens, 9)));
  }
  EXPECT_EQ(t.disk->size(), 1);  // b; a was dropped for it
  const PrefixLookup gone = t.store.Lookup("", a);
  EXPECT_EQ(gone.state, nullptr);
  EXPECT_EQ(gone.miss, PrefixMiss::kEvicted);
  EXPECT_EQ(t.store.Lookup("", b).length, 9);
}

TEST(PrefixDiskTest, ACorruptFileIsAMissAndIsRemoved) {
  ScopedTempDir dir;
  Tiers t(dir.path(), 3);
  const std::vector<TokenId> a = Range(100, 10), b = Range(200, 10);
  t.store.Insert("", Head(a, 9), StateAfter(Head(a, 9)));
  t.store.Insert("", Head(b, 9), StateAfter(Head(b, 9)));  // a goes to disk
  const std::vector<std::string> files = Files(dir.path());
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream file(dir.Join(files[0]), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x7f');
  }
  const PrefixLookup miss = t.store.Lookup("", a);
  EXPECT_EQ(miss.state, nullptr);
  EXPECT_EQ(t.disk->size(), 0);
  EXPECT_TRUE(Files(dir.path()).empty());
  EXPECT_EQ(t.store.Lookup("", b).length, 9);  // the store carries on
}

TEST(PrefixDiskTest, AnotherTenantsCheckpointOnDiskIsNeverRead) {
  ScopedTempDir dir;
  Tiers t(dir.path(), 3);
  const std::vector<TokenId> a = Range(100, 10), b = Range(200, 10);
  ASSERT_TRUE(t.store.Insert("alice", Head(a, 9), StateAfter(Head(a, 9))));
  ASSERT_TRUE(t.store.Insert("alice", Head(b, 9), StateAfter(Head(b, 9))));  // a goes to disk
  EXPECT_EQ(t.store.Lookup("bob", a).state, nullptr);
  EXPECT_EQ(t.disk->reads(), 0);
  EXPECT_EQ(t.disk->size(), 1);
  EXPECT_EQ(t.store.Lookup("alice", a).length, 9);
}

TEST(PrefixDiskTest, OpenClearsAnEarlierProcesssStatesAndRefusesAnUnusableDirectory) {
  ScopedTempDir dir;
  std::filesystem::create_directories(dir.Join("prefix"));
  std::ofstream(dir.Join("prefix/00000000000000aa.prefix")) << "an earlier process's state";
  std::ofstream(dir.Join("prefix/notes.txt")) << "not ours";
  ASSERT_TRUE(PrefixDisk::Open({.dir = dir.Join("prefix"), .budget_bytes = 1 << 20}).ok());
  EXPECT_EQ(Files(dir.Join("prefix")), std::vector<std::string>{"notes.txt"});

  std::ofstream(dir.Join("file")) << "a file, not a directory";
  const absl::Status unusable =
      PrefixDisk::Open({.dir = dir.Join("file/prefix"), .budget_bytes = 1 << 20}).status();
  EXPECT_EQ(unusable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unusable.message().find(dir.Join("file/prefix")), std::string::npos);
  EXPECT_EQ(PrefixDisk::Open({.dir = dir.Join("prefix"), .budget_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace linserve
