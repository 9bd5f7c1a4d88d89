// SessionStore's tiers: state slots -> host memory (host_state_memory_mib) -> disk (state_dir).
// The least recently used sessions leave host memory for the disk and come back bit-identical
// on their next use; a restart indexes the files without reading the states; a session written
// by another server sharing the directory is found on first use; a full or read-only disk
// loses nothing; 100k sessions round-trip through the disk.
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fake_backend.h"
#include "faulty_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/session_store.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kFingerprint = "tiers-test";
const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// A directory on tmpfs where there is one (fsync costs nothing there, and these tests write
// thousands of files on a machine whose disk may be busy), else under the test's temp dir.
class TestDir {
 public:
  TestDir() : dir_(fallback_.Join("state")) {
    char shm[] = "/dev/shm/linserve-tiers-XXXXXX";
    if (std::filesystem::is_directory("/dev/shm") && mkdtemp(shm) != nullptr) {
      on_shm_ = true;
      dir_ = shm;
    }
  }
  ~TestDir() {
    if (on_shm_) std::filesystem::remove_all(dir_);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;
  const std::string& path() const { return dir_; }

 private:
  ScopedTempDir fallback_;
  std::string dir_;
  bool on_shm_ = false;
};

std::unique_ptr<SessionPersister> OpenPersister(const std::string& dir, FileSystem* fs = nullptr) {
  absl::StatusOr<std::unique_ptr<SessionPersister>> p = SessionPersister::Open(
      {.dir = dir, .batch_interval = absl::ZeroDuration(), .file_system = fs}, TinyConfig(),
      std::string(kFingerprint), 1000);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// One server: a backend, a persister over `dir` and a store.
struct Server {
  Server(const std::string& dir, int32_t slots, SessionStoreOptions options,
         FileSystem* fs = nullptr)
      : backend(TinyConfig(), slots),
        persister(OpenPersister(dir, fs)),
        store(backend, options, persister.get()) {}

  // A request on `s` at `now` that feeds `tokens`, as the engine runs one; the session's lock
  // is given back after it, as the engine does after each operation.
  void Feed(Session& s, const std::vector<TokenId>& tokens, absl::Time now) {
    ASSERT_TRUE(store.MakeResident(s, now).ok());
    ASSERT_TRUE(backend.Prefill(*s.slot, tokens, {}).ok());
    s.history.Append(tokens);
    store.Release(s, now);
    store.SettleLocks();
  }

  FakeBackend backend;
  std::unique_ptr<SessionPersister> persister;
  SessionStore store;
};

// Sessions last used at kT0 never expire here (lookups read the clock, years after kT0).
SessionStoreOptions Options(int64_t host_mib, int32_t max_sessions = 1000) {
  return {.max_sessions = max_sessions,
          .idle_timeout = absl::Hours(24 * 365 * 100),
          .host_state_memory_mib = host_mib};
}

void ExpectSameSnapshot(const SessionSnapshot& got, const SessionSnapshot& want) {
  EXPECT_EQ(got.state.position, want.state.position);
  EXPECT_EQ(got.state.state, want.state.state);
  EXPECT_EQ(got.pending, want.pending);
  EXPECT_EQ(got.token_counts, want.token_counts);
  EXPECT_EQ(got.num_tokens, want.num_tokens);
  EXPECT_EQ(got.create_time, want.create_time);
}

TEST(SessionTiersTest, LeastRecentlyUsedLeaveHostMemoryForDiskAndComeBackIdentical) {
  TestDir dir;
  Server server(dir.path(), 1, Options(/*host_mib=*/1));
  SessionStore& store = server.store;
  // ~2.5 KB each in host memory: 1 MiB holds about 400 of them.
  constexpr int kSessions = 600;
  std::vector<SessionId> ids;
  std::map<SessionId, SessionSnapshot> want;
  for (int i = 0; i < kSessions; ++i) {
    Session* s = *store.Create(kT0);
    server.Feed(*s, {static_cast<TokenId>(i % 250 + 1), 7}, kT0 + absl::Seconds(i));
    s->history.Append({9});  // sent to the client, not yet fed
    s->history.SetPending({9});
    store.Touch(*s, kT0 + absl::Seconds(i));
    ids.push_back(s->id);
    want[s->id] = *store.Snapshot(*s);
  }
  EXPECT_LE(store.host_bytes(), int64_t{1} << 20);
  EXPECT_GT(store.disk_sessions(), 100);
  EXPECT_EQ(store.disk_sessions() + store.host_sessions() + 1, kSessions);
  EXPECT_EQ(store.evictions_to_disk(), store.disk_sessions());

  // The oldest went to disk, the newest stayed in memory.
  const int64_t loads = store.loads_from_disk();
  ASSERT_TRUE(store.Find(ids[kSessions - 2]).ok());
  EXPECT_EQ(store.loads_from_disk(), loads);
  ASSERT_TRUE(store.Find(ids[0]).ok());
  EXPECT_EQ(store.loads_from_disk(), loads + 1);

  // A session on disk is described without being read back.
  absl::StatusOr<SessionInfo> info = store.Info(ids[1]);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_tokens, 3);
  EXPECT_EQ(info->last_use_time, kT0 + absl::Seconds(1));
  EXPECT_FALSE(info->resident);
  EXPECT_EQ(store.loads_from_disk(), loads + 1);
  EXPECT_EQ(store.List(std::nullopt, kSessions + 1).size(), static_cast<size_t>(kSessions));

  // Every session continues exactly: from disk, host memory or its slot.
  for (const SessionId& id : ids) {
    absl::StatusOr<Session*> s = store.Find(id);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(store.MakeResident(**s, kT0 + absl::Hours(1)).ok());
    absl::StatusOr<SessionSnapshot> got = store.Snapshot(**s);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameSnapshot(*got, want[id]);
    store.SettleLocks();
  }
  EXPECT_LE(store.host_bytes(), int64_t{1} << 20);
}

TEST(SessionTiersTest, WithNoHostMemoryIdleSessionsGoFromTheirSlotStraightToDisk) {
  TestDir dir;
  Server server(dir.path(), 1, Options(/*host_mib=*/0));
  Session* a = *server.store.Create(kT0);
  server.Feed(*a, {1, 2}, kT0);
  const SessionId a_id = a->id;
  const SessionSnapshot a_state = *server.store.Snapshot(*a);
  Session* b = *server.store.Create(kT0);
  server.Feed(*b, {3}, kT0 + absl::Seconds(1));  // a leaves its slot, and memory
  EXPECT_EQ(server.store.host_sessions(), 0);
  EXPECT_EQ(server.store.disk_sessions(), 1);
  absl::StatusOr<Session*> back = server.store.Find(a_id);
  ASSERT_TRUE(back.ok());
  ExpectSameSnapshot(*server.store.Snapshot(**back), a_state);
}

TEST(SessionTiersTest, RestoreIndexesTheFilesAndReadsOnlyWhatGetsASlot) {
  TestDir dir;
  std::map<SessionId, SessionSnapshot> want;
  std::map<SessionId, std::string> owners;
  {
    Server first(dir.path(), 1, Options(/*host_mib=*/0));
    for (int i = 0; i < 20; ++i) {
      Session* s = *first.store.Create(kT0, i % 2 == 0 ? "alice" : "bob");
      owners[s->id] = s->tenant;
      first.Feed(*s, {static_cast<TokenId>(i + 1)}, kT0 + absl::Seconds(i));
      want[s->id] = *first.store.Snapshot(*s);
    }
    ASSERT_TRUE(first.persister->Flush().ok());
  }
  Server second(dir.path(), 2, Options(/*host_mib=*/0));
  EXPECT_EQ(second.store.Restore(kT0 + absl::Minutes(1)), 20);
  EXPECT_EQ(second.store.loads_from_disk(), 2);  // the two most recent, into the free slots
  EXPECT_EQ(second.store.resident_named_sessions(), 2);
  EXPECT_EQ(second.store.disk_sessions(), 18);
  EXPECT_EQ(second.store.host_sessions(), 0);
  // Listing and describing come from the index, owners included.
  const std::vector<SessionInfo> alice = second.store.List(std::nullopt, 100, "alice");
  ASSERT_EQ(alice.size(), 10u);
  for (const SessionInfo& info : alice) {
    EXPECT_EQ(info.num_tokens, 1);
    EXPECT_EQ(info.create_time, kT0);
    EXPECT_EQ(second.store.Find(info.id, "bob").status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(second.store.loads_from_disk(), 2);
  for (const auto& [id, snapshot] : want) {
    absl::StatusOr<Session*> s = second.store.Find(id, owners[id]);
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectSameSnapshot(*second.store.Snapshot(**s), snapshot);
  }
  EXPECT_EQ(second.store.loads_from_disk(), 20);
}

// Scale-out (#15): the replica a proxy's ring assigns a session to loads it on first use from
// the directory the replicas share, though it never held it.
TEST(SessionTiersTest, FindsASessionAnotherServerWroteToTheSharedDirectory) {
  TestDir dir;
  Server writer(dir.path(), 1, Options(4));
  Server reader(dir.path(), 1, Options(4));  // started before the session existed
  Session* s = *writer.store.Create(kT0, "alice");
  writer.Feed(*s, {5, 6, 7}, kT0);
  const SessionId id = s->id;
  const SessionSnapshot want = *writer.store.Snapshot(*s);
  ASSERT_TRUE(writer.persister->Flush().ok());

  EXPECT_EQ(reader.store.Find(id, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader.store.named_sessions(), 0);
  absl::StatusOr<SessionInfo> info = reader.store.Info(id, "alice");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens, 3);
  absl::StatusOr<Session*> found = reader.store.Find(id, "alice");
  ASSERT_TRUE(found.ok()) << found.status();
  ExpectSameSnapshot(*reader.store.Snapshot(**found), want);
  EXPECT_EQ(reader.store.named_sessions(), 1);

  // Deleted here: its file's removal is queued, and the id is not found again meanwhile.
  reader.store.Erase(*found);
  EXPECT_EQ(reader.store.Find(id, "alice").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(reader.persister->Flush().ok());
  EXPECT_EQ(reader.store.Find(id, "alice").status().code(), absl::StatusCode::kNotFound);
  // An id no one wrote is simply unknown.
  EXPECT_EQ(reader.store.Find(*NewSessionId(), "alice").status().code(),
            absl::StatusCode::kNotFound);
}

class SessionTiersFaultTest : public ::testing::TestWithParam<absl::Status> {};

// Sessions evicted to a disk that refuses writes stay with the persister, are served from
// there, and reach the disk once it accepts writes again.
TEST_P(SessionTiersFaultTest, EvictionToAFailingDiskLosesNothing) {
  TestDir dir;
  FaultyFileSystem fs;
  std::map<SessionId, SessionSnapshot> want;
  {
    Server server(dir.path(), 1, Options(/*host_mib=*/0), &fs);
    fs.FailFrom(fs.mutating_calls(), GetParam());
    std::vector<SessionId> ids;
    for (int i = 0; i < 4; ++i) {
      Session* s = *server.store.Create(kT0);
      server.Feed(*s, {static_cast<TokenId>(10 + i), 3}, kT0 + absl::Seconds(i));
      ids.push_back(s->id);
      want[s->id] = *server.store.Snapshot(*s);
    }
    EXPECT_EQ(server.store.disk_sessions(), 3);
    EXPECT_FALSE(server.persister->Flush().ok());
    EXPECT_GT(server.persister->write_errors(), 0);
    for (const SessionId& id : ids) {
      absl::StatusOr<Session*> s = server.store.Find(id);
      ASSERT_TRUE(s.ok()) << s.status();
      ExpectSameSnapshot(*server.store.Snapshot(**s), want[id]);
    }
    fs.Heal();
    EXPECT_TRUE(server.persister->Flush().ok());
  }
  Server restarted(dir.path(), 1, Options(/*host_mib=*/0));
  EXPECT_EQ(restarted.store.Restore(kT0 + absl::Minutes(1)), 4);
  for (const auto& [id, snapshot] : want) {
    absl::StatusOr<Session*> s = restarted.store.Find(id);
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectSameSnapshot(*restarted.store.Snapshot(**s), snapshot);
  }
}

INSTANTIATE_TEST_SUITE_P(FullOrReadOnly, SessionTiersFaultTest,
                         ::testing::Values(absl::ResourceExhaustedError("No space left on device"),
                                           absl::FailedPreconditionError("Read-only file system")));

TEST(SessionTiersTest, ARecordThatCannotBeReadBackIsDataLossAndLeavesTheIndex) {
  TestDir dir;
  SessionId id;
  {
    Server first(dir.path(), 1, Options(0));
    Session* s = *first.store.Create(kT0);
    first.Feed(*s, {1, 2, 3}, kT0);
    id = s->id;
    ASSERT_TRUE(first.persister->Flush().ok());
  }
  const std::string path = absl::StrCat(dir.path(), "/", id.value, ".session");
  {
    // One state byte flipped: the header is intact, the checksum is not.
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    file.put('\x7f');
  }
  Server second(dir.path(), 1, Options(0));
  ASSERT_TRUE(second.backend.AllocateSlot().ok());  // no free slot: nothing is read at start
  EXPECT_EQ(second.store.Restore(kT0 + absl::Minutes(1)), 1);
  const absl::Status status = second.store.Find(id).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("checksum"));
  EXPECT_EQ(second.store.named_sessions(), 0);
  ASSERT_TRUE(second.persister->Flush().ok());
  EXPECT_TRUE(std::filesystem::exists(path));  // left for the operator
}

// Restored sessions count for their owner: a tenant at its quota after a restart is refused,
// the sessions beyond it stay on disk, and the others are unaffected.
TEST(SessionTiersTest, RestoredSessionsCountForTheirTenant) {
  TestDir dir;
  {
    Server first(dir.path(), 1, Options(0));
    for (const char* owner : {"alice", "alice", "alice", "bob"}) {
      ASSERT_TRUE(first.store.Create(kT0, owner).ok());
    }
    ASSERT_TRUE(first.persister->Flush().ok());
  }
  SessionStoreOptions options = Options(0);
  options.tenant_max_sessions = 2;
  Server second(dir.path(), 1, options);
  EXPECT_EQ(second.store.Restore(kT0 + absl::Minutes(1)), 3);
  EXPECT_EQ(second.store.named_sessions("alice"), 2);
  EXPECT_EQ(second.store.named_sessions("bob"), 1);
  const absl::Status refused = second.store.Create(kT0, "alice").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("tenant_max_sessions (2)"));
  EXPECT_TRUE(second.store.Create(kT0, "bob").ok());
  ASSERT_TRUE(second.persister->Flush().ok());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    files += entry.path().extension() == ".session" ? 1 : 0;
  }
  EXPECT_EQ(files, 5);  // the alice session not restored stays in place
}

// 100k hibernated sessions through the disk: written behind, evicted, indexed at a restart
// from the file headers, and each read back on use with its exact state and history.
TEST(SessionTiersTest, HundredThousandHibernatedSessionsRoundTripThroughDisk) {
  constexpr int kSessions = 100000;
  constexpr int kDistinct = 250;  // states repeat every kDistinct sessions
  TestDir test_dir;
  const std::string& dir = test_dir.path();
  std::vector<SessionSnapshot> want(kDistinct);
  std::vector<SessionId> ids;
  ids.reserve(kSessions);
  {
    Server first(dir, 1, Options(/*host_mib=*/0, kSessions));
    for (int i = 0; i < kSessions; ++i) {
      absl::StatusOr<Session*> s = first.store.Create(kT0);
      ASSERT_TRUE(s.ok()) << s.status();
      first.Feed(**s, {static_cast<TokenId>(i % kDistinct + 1), 1}, kT0 + absl::Seconds(1));
      ids.push_back((*s)->id);
      if (i < kDistinct) want[i] = *first.store.Snapshot(**s);
      // Each change waiting for the writer holds its session's lock (a descriptor): let the
      // writer keep up, as it does behind a real engine's requests.
      if (i % 1000 == 999) {
        ASSERT_TRUE(first.persister->Flush().ok());
      }
    }
    EXPECT_EQ(first.store.disk_sessions(), kSessions - 1);
    ASSERT_TRUE(first.persister->Flush().ok());
  }
  Server second(dir, 1, Options(/*host_mib=*/0, kSessions));
  EXPECT_EQ(second.store.Restore(kT0 + absl::Minutes(1)), kSessions);
  EXPECT_EQ(second.store.disk_sessions(), kSessions - 1);
  for (int i = 0; i < kSessions; ++i) {
    absl::StatusOr<Session*> s = second.store.Find(ids[i]);
    ASSERT_TRUE(s.ok()) << s.status();
    absl::StatusOr<SessionSnapshot> got = second.store.Snapshot(**s);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->state.state, want[i % kDistinct].state.state) << i;
    ASSERT_EQ(got->token_counts, want[i % kDistinct].token_counts) << i;
    ASSERT_EQ(got->num_tokens, 2);
    second.store.SettleLocks();
  }
  EXPECT_EQ(second.store.loads_from_disk(), kSessions);
}

}  // namespace
}  // namespace linserve
