// SessionPersister: records round-trip; a full disk at any write, rename, removal or directory
// sync never leaves a half-written or temporary file, never loses the previous record, and the
// failed change is written once the disk has room; an unusable directory fails Open.
#include "server/sessions/session_persister.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "faulty_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kFingerprint = "persister-test";
const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

SessionRecord Record(const SessionId& id, int64_t tokens, const std::string& tenant = "") {
  const ModelConfig config = TinyConfig();
  SessionRecord r;
  r.id = id;
  r.tenant = tenant;
  r.last_use_time = kT0 + absl::Seconds(tokens);
  r.snapshot.create_time = kT0;
  r.snapshot.state.position = tokens;
  r.snapshot.state.state.assign(config.StateFloatsPerSlot(), 0.0f);
  r.snapshot.state.state[0] = static_cast<float>(tokens);
  r.snapshot.num_tokens = tokens;
  if (tokens > 0) r.snapshot.token_counts = {{1, tokens}};
  return r;
}

SessionId Id(char c) { return SessionId{std::string(32, c)}; }

std::unique_ptr<SessionPersister> Open(const std::string& dir, FileSystem* fs = nullptr) {
  absl::StatusOr<std::unique_ptr<SessionPersister>> p = SessionPersister::Open(
      {.dir = dir, .file_system = fs}, TinyConfig(), std::string(kFingerprint), 1000);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

TEST(SessionPersisterConstraintTest, ARecordWhoseConstraintTheCheckRefusesIsNotRead) {
  ScopedTempDir dir;
  SessionRecord good = Record(Id('a'), 3);
  good.snapshot.constraint.emplace();
  good.snapshot.constraint->spec.kind = ConstraintKind::kGrammar;
  good.snapshot.constraint->spec.text = "root ::= \"a\"";
  good.snapshot.constraint->matcher = "ok";
  SessionRecord bad = Record(Id('b'), 3);
  bad.snapshot.constraint = good.snapshot.constraint;
  bad.snapshot.constraint->matcher = "corrupt";
  std::vector<std::string> checked;
  {
    std::unique_ptr<SessionPersister> writer = Open(dir.path());
    ASSERT_NE(writer, nullptr);
    writer->Put(good);
    writer->Put(bad);
    writer->Put(Record(Id('c'), 3));
    ASSERT_TRUE(writer->Flush().ok());
  }
  absl::StatusOr<std::unique_ptr<SessionPersister>> reader = SessionPersister::Open(
      {.dir = dir.path(),
       .check_constraint =
           [&checked](const ConstraintState& state) {
             checked.push_back(state.matcher);
             return state.matcher == "ok" ? absl::OkStatus()
                                          : absl::InvalidArgumentError("snapshot constraint: bad");
           }},
      TinyConfig(), std::string(kFingerprint), 1000);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<SessionRecord> read = (*reader)->Read(Id('a'), kT0 + absl::Minutes(1));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->snapshot.constraint, good.snapshot.constraint);
  const absl::Status refused = (*reader)->Read(Id('b'), kT0 + absl::Minutes(1)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("snapshot constraint"));
  // A record without a constraint has nothing to check.
  ASSERT_TRUE((*reader)->Read(Id('c'), kT0 + absl::Minutes(1)).ok());
  EXPECT_EQ(checked, (std::vector<std::string>{"ok", "corrupt"}));
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SessionPersisterTest, WritesRemovesAndLoadsRecordsExactly) {
  ScopedTempDir dir;
  auto p = Open(dir.Join("state"));
  p->Put(Record(Id('a'), 3, "alice"));
  p->Put(Record(Id('b'), 1));
  p->Put(Record(Id('b'), 2));  // coalesces with the previous one
  p->Put(Record(Id('c'), 1));
  p->Remove(Id('c'));
  ASSERT_TRUE(p->Flush().ok());
  EXPECT_EQ(Files(dir.Join("state")),
            (std::vector<std::string>{Id('a').value + ".session", Id('b').value + ".session"}));
  std::vector<SessionRecord> loaded = p->Load(kT0);
  ASSERT_EQ(loaded.size(), 2u);
  std::sort(loaded.begin(), loaded.end(),
            [](const SessionRecord& x, const SessionRecord& y) { return x.id < y.id; });
  EXPECT_EQ(loaded[0].tenant, "alice");
  EXPECT_EQ(loaded[0].last_use_time, kT0 + absl::Seconds(3));
  EXPECT_EQ(loaded[0].snapshot.create_time, kT0);
  EXPECT_EQ(loaded[0].snapshot.state.state, Record(Id('a'), 3).snapshot.state.state);
  EXPECT_EQ(loaded[1].snapshot.num_tokens, 2);
  // Loading removes nothing.
  EXPECT_EQ(Files(dir.Join("state")).size(), 2u);
}

// Two persisters on one directory are two replicas: each reads what the other wrote, and knows
// when the file it last wrote or read was replaced or removed by the other.
TEST(SessionPersisterTest, ReplicasSharingADirectorySeeEachOthersChanges) {
  ScopedTempDir dir;
  auto a = Open(dir.Join("state"));
  auto b = Open(dir.Join("state"));
  EXPECT_EQ(b->Read(Id('a'), kT0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(a->ChangedElsewhere(Id('a')));  // never written or read here
  a->Put(Record(Id('a'), 3));
  ASSERT_TRUE(a->Flush().ok());
  EXPECT_FALSE(a->ChangedElsewhere(Id('a')));
  absl::StatusOr<SessionRecord> read = b->Read(Id('a'), kT0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->snapshot.num_tokens, 3);
  EXPECT_FALSE(b->ChangedElsewhere(Id('a')));

  b->Put(Record(Id('a'), 5));
  ASSERT_TRUE(b->Flush().ok());
  EXPECT_TRUE(a->ChangedElsewhere(Id('a')));
  EXPECT_FALSE(b->ChangedElsewhere(Id('a')));
  EXPECT_EQ(a->Read(Id('a'), kT0)->snapshot.num_tokens, 5);
  EXPECT_FALSE(a->ChangedElsewhere(Id('a')));

  b->Remove(Id('a'));
  ASSERT_TRUE(b->Flush().ok());
  EXPECT_TRUE(a->ChangedElsewhere(Id('a')));
  EXPECT_EQ(a->Read(Id('a'), kT0).status().code(), absl::StatusCode::kNotFound);
}

TEST(SessionPersisterTest, OpenRemovesLeftoverTemporaryFilesAndKeepsRecords) {
  ScopedTempDir dir;
  {
    auto p = Open(dir.Join("state"));
    p->Put(Record(Id('a'), 3));
    ASSERT_TRUE(p->Flush().ok());
  }
  // What a crash between write and rename leaves: a partial temporary file.
  { std::ofstream(dir.Join("state/" + Id('a').value + ".session.tmp")) << "half"; }
  auto p = Open(dir.Join("state"));
  EXPECT_EQ(Files(dir.Join("state")), std::vector<std::string>{Id('a').value + ".session"});
  EXPECT_EQ(p->Load(kT0).size(), 1u);
}

// ENOSPC from the Nth file-system call on, for every N a sequence of changes makes: the
// directory then holds, per session, a whole record (the one before the failure or the one
// after), never a torn one nor a temporary file once reopened; the engine-facing WhenDurable
// reports the error; after the disk has room again a Flush writes the latest of everything.
TEST(SessionPersisterTest, FullDiskAtEveryWriteNeverTearsOrLosesARecord) {
  ScopedTempDir dir;
  // Until the failure comes after every call the changes make (batching varies with timing).
  for (int64_t n = 0;; ++n) {
    SCOPED_TRACE(n);
    ASSERT_LT(n, 100);
    const std::string state = dir.Join("state" + std::to_string(n));
    FaultyFileSystem fs;
    auto p = Open(state, &fs);
    ASSERT_NE(p, nullptr);
    fs.FailFrom(fs.mutating_calls() + n, absl::ResourceExhaustedError("No space left on device"));
    p->Put(Record(Id('a'), 1));
    p->Put(Record(Id('b'), 1));
    const absl::Status first = p->Flush();
    p->Put(Record(Id('a'), 2));
    p->Remove(Id('b'));
    const absl::Status second = p->Flush();
    if (first.ok() && second.ok()) {
      EXPECT_GE(n, 9);  // 2 writes + 2 renames + sync, 1 write + rename + removal + sync
      break;
    }
    EXPECT_THAT(std::string((first.ok() ? second : first).message()), HasSubstr("space"));

    // As a crash now would leave it, read by a fresh persister on the real file system.
    {
      auto reader = Open(state);
      for (const SessionRecord& r : reader->Load(kT0 + absl::Hours(1))) {
        EXPECT_TRUE(r.snapshot.num_tokens == 1 || r.snapshot.num_tokens == 2);
        EXPECT_EQ(r.snapshot.state.state[0], static_cast<float>(r.snapshot.num_tokens));
      }
      // Besides records: temporary files, and the lock files of the sessions whose writes
      // are failing (their locks stay held for the retry).
      for (const std::string& name : Files(state)) {
        EXPECT_TRUE(absl::EndsWith(name, ".session") || absl::EndsWith(name, ".tmp") ||
                    absl::EndsWith(name, ".lock"))
            << name;
      }
    }
    fs.Heal();
    ASSERT_TRUE(p->Flush().ok());
    EXPECT_EQ(Files(state), std::vector<std::string>{Id('a').value + ".session"});
    std::vector<SessionRecord> loaded = p->Load(kT0 + absl::Hours(1));
    ASSERT_EQ(loaded.size(), 1u);
    EXPECT_EQ(loaded[0].snapshot.num_tokens, 2);
    EXPECT_GT(p->write_errors(), 0);
  }
}

TEST(SessionPersisterTest, AnUnusableDirectoryFailsOpenNamingIt) {
  ScopedTempDir dir;
  for (absl::Status error : {absl::ResourceExhaustedError("No space left on device"),
                             absl::FailedPreconditionError("Read-only file system")}) {
    FaultyFileSystem fs;
    fs.FailFrom(0, error);
    absl::StatusOr<std::unique_ptr<SessionPersister>> p = SessionPersister::Open(
        {.dir = dir.Join("state"), .file_system = &fs}, TinyConfig(),
        std::string(kFingerprint), 1000);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(dir.Join("state")));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(error.message()));
  }
  // Writes fail only after the directory exists: caught by the probe file.
  FaultyFileSystem fs;
  fs.FailFrom(1, absl::ResourceExhaustedError("No space left on device"));
  EXPECT_EQ(SessionPersister::Open({.dir = dir.Join("state2"), .file_system = &fs},
                                   TinyConfig(), std::string(kFingerprint), 1000)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}


// Another server sharing the directory is writing session b (it holds b's lock); a crash left a
// temporary file of a's. Start-up removes a's, never b's, and leaves a young probe file alone.
TEST(SessionPersisterTest, StartRemovesOnlyTemporaryFilesNoServerIsWriting) {
  ScopedTempDir dir;
  const std::string state = dir.Join("state");
  std::filesystem::create_directories(state);
  SessionLocks other(state);
  ASSERT_TRUE(other.Acquire(Id('b')).ok());
  const std::string a_temp = Id('a').value + ".session.0badc0de-3.tmp";
  const std::string b_temp = Id('b').value + ".session.0badc0de-4.tmp";
  const std::string probe = ".linserve-probe-0badc0de";
  for (const std::string& name : {a_temp, b_temp, probe}) {
    std::ofstream(state + "/" + name) << "partial";
  }
  auto p = Open(state);
  std::vector<std::string> files = Files(state);
  EXPECT_THAT(files, ::testing::Contains(b_temp));
  EXPECT_THAT(files, ::testing::Contains(probe));
  EXPECT_THAT(files, ::testing::Not(::testing::Contains(a_temp)));
  other.Release(Id('b'));
  p.reset();
  p = Open(state);
  EXPECT_THAT(Files(state), ::testing::Not(::testing::Contains(b_temp)));
}

// A queued change holds its session's lock until it is written: meanwhile another server
// cannot take the session; afterwards it can, and no lock file is left behind.
TEST(SessionPersisterTest, AQueuedChangeHoldsItsSessionsLockUntilWritten) {
  ScopedTempDir dir;
  const std::string state = dir.Join("state");
  FaultyFileSystem fs;
  auto p = Open(state, &fs);
  SessionLocks other(state);
  fs.FailFrom(fs.mutating_calls(), absl::ResourceExhaustedError("No space left on device"));
  p->Put(Record(Id('a'), 3));
  EXPECT_FALSE(p->Flush().ok());
  EXPECT_EQ(other.Acquire(Id('a')).code(), absl::StatusCode::kUnavailable);
  fs.Heal();
  ASSERT_TRUE(p->Flush().ok());
  ASSERT_TRUE(other.Acquire(Id('a')).ok());
  other.Release(Id('a'));
  EXPECT_EQ(Files(state), std::vector<std::string>{Id('a').value + ".session"});
  // A change of a session another server holds is not queued: the caller hears why.
  ASSERT_TRUE(other.Acquire(Id('b')).ok());
  p->Put(Record(Id('b'), 1));
  absl::Notification done;
  absl::Status status;
  p->WhenDurable({Id('b')}, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_FALSE(std::filesystem::exists(state + "/" + Id('b').value + ".session"));
}

// WhenDurable for some sessions hears about those sessions' writes, not other sessions';
// healthy() is false while any write fails and true again once it is retried successfully.
TEST(SessionPersisterTest, WhenDurableReportsTheNamedSessionsOwnWrites) {
  ScopedTempDir dir;
  FaultyFileSystem fs;
  SessionPersisterOptions options{.dir = dir.Join("state"), .file_system = &fs};
  options.retry_interval = absl::Milliseconds(20);
  absl::StatusOr<std::unique_ptr<SessionPersister>> opened =
      SessionPersister::Open(options, TinyConfig(), std::string(kFingerprint), 1000);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SessionPersister& p = **opened;
  auto durable = [&](std::vector<SessionId> ids) {
    absl::Notification done;
    absl::Status status;
    p.WhenDurable(std::move(ids), [&](absl::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  };
  p.Put(Record(Id('a'), 3));
  ASSERT_TRUE(durable({Id('a')}).ok());
  EXPECT_TRUE(p.healthy());
  fs.FailFrom(fs.mutating_calls(), absl::ResourceExhaustedError("No space left on device"));
  p.Put(Record(Id('b'), 1));
  const absl::Status b = durable({Id('b')});
  EXPECT_EQ(b.code(), absl::StatusCode::kResourceExhausted) << b;
  EXPECT_FALSE(p.healthy());
  EXPECT_TRUE(durable({Id('a')}).ok()) << "a's latest change is on disk";
  EXPECT_FALSE(durable({Id('a'), Id('b')}).ok());
  EXPECT_GE(p.write_errors(), 1);
  fs.Heal();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!p.healthy() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(p.healthy());
  EXPECT_TRUE(durable({Id('b')}).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.Join("state/" + Id('b').value + ".session")));
}

}  // namespace
}  // namespace linserve
