// The three on-disk formats against committed files (tests/server/testdata/README.md): a session
// snapshot, a session record and a prefix-state file, each written by the writers of the commit
// that added them, for the inputs below. Every file still loads, field by field, and today's
// writers reproduce the files of the current versions byte for byte: the formats cannot drift
// unnoticed, whatever the host's byte order. Files of an earlier version (snapshot version 1, and
// the record that holds one) must still load.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/prefix/prefix_disk.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/session_record.h"
#include "server/sessions/snapshot.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

constexpr char kFingerprint[] = "5f2c9a0e4b7d18362a1e0c9f7b3d5a8e6c4f2b0a9d8e7f6c5b4a39281706f5e4";
constexpr int64_t kMaxPendingTokens = 64;
const absl::Time kNow = absl::FromUnixSeconds(1700003600);
constexpr char kTenant[] = "tenant-a";
const SessionId kSessionId{"0123456789abcdef0123456789abcdef"};
constexpr uint64_t kPrefixKey = 0x0123456789abcdef;

// A fixed model of its own (not TinyConfig, which may change): byte tokenizer, 2 layers of 2
// heads, head_dim = feature_dim = 4, so 2 · 2 · 4 · (4 + 1) = 80 state floats.
ModelConfig FixtureConfig() {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.head_dim = 4;
  c.feature_dim = 4;
  c.d_ff = 16;
  c.bos_token_id = 256;
  c.eos_token_id = 257;
  return c;
}

// Distinct values, exact in any arithmetic, with all 24 bits of the mantissa in use so that every
// byte of every float differs between orders; z (the normaliser) non-negative, as a real state's.
std::vector<float> FixtureState() {
  const ModelConfig c = FixtureConfig();
  const uint32_t s_floats = static_cast<uint32_t>(c.feature_dim * c.head_dim);
  const uint32_t head_floats = s_floats + static_cast<uint32_t>(c.feature_dim);
  std::vector<float> state;
  for (uint32_t i = 0; i < 80; ++i) {
    const uint32_t bits = (i * 2654435761u) >> 8;  // [0, 2^24)
    float x = static_cast<float>(static_cast<int32_t>(bits) - (1 << 23)) / (1 << 20);
    if (i % head_floats >= s_floats && x < 0) x = -x;
    state.push_back(x);
  }
  return state;
}

// A session after the prompt BOS "Hi" and two more tokens, the last two not yet fed.
SessionSnapshot FixtureSnapshot() {
  SessionSnapshot s;
  s.state.position = 5;
  s.state.state = FixtureState();
  s.pending = {104, 105};
  s.token_counts = {{10, 1}, {72, 1}, {104, 2}, {105, 2}, {256, 1}};
  s.num_tokens = 7;
  s.create_time = absl::FromUnixMicros(1700000000123456);
  return s;
}

// The same session in the middle of a constrained document (snapshot version 2).
SessionSnapshot FixtureSnapshotWithConstraint() {
  SessionSnapshot s = FixtureSnapshot();
  s.constraint = ConstraintState{
      .spec = {.kind = ConstraintKind::kGrammar, .text = "root ::= \"Hi\" [a-z]+"},
      .matcher = std::string("\x01\x00\x02\xfematcher", 12)};
  return s;
}

SessionRecord FixtureRecord(SessionSnapshot snapshot = FixtureSnapshot()) {
  SessionRecord r;
  r.id = kSessionId;
  r.tenant = kTenant;
  r.last_use_time = absl::FromUnixMicros(1700000090654321);
  r.snapshot = std::move(snapshot);
  return r;
}

const std::vector<TokenId> kPrefixTokens = {256, 72, 101, 108, 108, 111};

StateBlob FixturePrefixState() {
  StateBlob state;
  state.position = static_cast<int64_t>(kPrefixTokens.size());
  state.state = FixtureState();
  return state;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string Fixture(const std::string& name) {
  return ReadBytes(std::string(LINSERVE_SOURCE_DIR) + "/tests/server/testdata/" + name);
}

void ExpectSnapshotIsTheFixture(const SessionSnapshot& s,
                                const SessionSnapshot& want = FixtureSnapshot()) {
  EXPECT_EQ(s.state.position, want.state.position);
  EXPECT_EQ(s.state.state, want.state.state);
  EXPECT_EQ(s.pending, want.pending);
  EXPECT_EQ(s.token_counts, want.token_counts);
  EXPECT_EQ(s.num_tokens, want.num_tokens);
  EXPECT_EQ(s.create_time, want.create_time);
  EXPECT_EQ(s.constraint, want.constraint);
}

void ExpectRecordIsTheFixture(const SessionRecord& r,
                              const SessionSnapshot& want = FixtureSnapshot()) {
  EXPECT_EQ(r.id, kSessionId);
  EXPECT_EQ(r.tenant, kTenant);
  EXPECT_EQ(r.last_use_time, FixtureRecord().last_use_time);
  ExpectSnapshotIsTheFixture(r.snapshot, want);
}

void ExpectHeaderIsTheFixture(const SessionRecordHeader& h) {
  EXPECT_EQ(h.id, kSessionId);
  EXPECT_EQ(h.tenant, kTenant);
  EXPECT_EQ(h.last_use_time, FixtureRecord().last_use_time);
  EXPECT_EQ(h.create_time, FixtureSnapshot().create_time);
  EXPECT_EQ(h.num_tokens, FixtureSnapshot().num_tokens);
}

// The first bytes of each file, spelled out: the integers are little-endian.
TEST(DiskFormatsTest, TheFilesAreLittleEndian) {
  EXPECT_EQ(Fixture("snapshot_v1.bin").substr(0, 16),
            std::string("LSVSNAP\x1a\x01\x00\x00\x00\x40\x00\x00\x00", 16));
  EXPECT_EQ(Fixture("snapshot_v2.bin").substr(0, 16),
            std::string("LSVSNAP\x1a\x02\x00\x00\x00\x40\x00\x00\x00", 16));
  EXPECT_EQ(Fixture("session_record_v1.bin").substr(0, 20),
            std::string("LSVSREC\x1a\x01\x00\x00\x00\x71\x86\x85\x1d\x24\x0a\x06\x00", 20));
  EXPECT_EQ(Fixture("session_record_v1_snapshot_v2.bin").substr(0, 20),
            std::string("LSVSREC\x1a\x01\x00\x00\x00\x71\x86\x85\x1d\x24\x0a\x06\x00", 20));
  EXPECT_EQ(Fixture("prefix_state.bin").substr(0, 12),
            std::string("LSVPREF\x1a\x08\x00\x00\x00", 12));
}

TEST(DiskFormatsTest, TheVersion1SnapshotLoads) {
  const std::string bytes = Fixture("snapshot_v1.bin");
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(bytes, FixtureConfig(), kFingerprint, kMaxPendingTokens, kNow);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ExpectSnapshotIsTheFixture(*snapshot);

  absl::StatusOr<SnapshotHeader> header = DecodeSnapshotHeader(
      absl::string_view(bytes).substr(0, kMaxSnapshotHeaderBytes), kFingerprint, kNow);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->create_time, FixtureSnapshot().create_time);
  EXPECT_EQ(header->num_tokens, FixtureSnapshot().num_tokens);
  EXPECT_EQ(header->position, FixtureSnapshot().state.position);

  // Written again it is a version 2 snapshot of the same session, without a constraint.
  absl::StatusOr<SessionSnapshot> again = DecodeSnapshot(
      EncodeSnapshot(*snapshot, kFingerprint), FixtureConfig(), kFingerprint, kMaxPendingTokens,
      kNow);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSnapshotIsTheFixture(*again);
}

TEST(DiskFormatsTest, TheVersion2SnapshotLoadsAndIsWrittenAgainByteForByte) {
  const std::string bytes = Fixture("snapshot_v2.bin");
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(bytes, FixtureConfig(), kFingerprint, kMaxPendingTokens, kNow);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ExpectSnapshotIsTheFixture(*snapshot, FixtureSnapshotWithConstraint());

  absl::StatusOr<SnapshotHeader> header = DecodeSnapshotHeader(
      absl::string_view(bytes).substr(0, kMaxSnapshotHeaderBytes), kFingerprint, kNow);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->num_tokens, FixtureSnapshot().num_tokens);

  EXPECT_EQ(EncodeSnapshot(FixtureSnapshotWithConstraint(), kFingerprint), bytes);
}

TEST(DiskFormatsTest, TheSessionRecordOfAVersion1SnapshotLoads) {
  const std::string bytes = Fixture("session_record_v1.bin");
  absl::StatusOr<SessionRecord> record = DecodeSessionRecord(
      bytes, kSessionId, FixtureConfig(), kFingerprint, kMaxPendingTokens, kNow);
  ASSERT_TRUE(record.ok()) << record.status();
  ExpectRecordIsTheFixture(*record);

  absl::StatusOr<SessionRecordHeader> header = DecodeSessionRecordHeader(
      absl::string_view(bytes).substr(0, kMaxSessionRecordHeaderBytes), kSessionId, kFingerprint,
      kNow);
  ASSERT_TRUE(header.ok()) << header.status();
  ExpectHeaderIsTheFixture(*header);
}

TEST(DiskFormatsTest, TheSessionRecordLoadsAndIsWrittenAgainByteForByte) {
  const std::string bytes = Fixture("session_record_v1_snapshot_v2.bin");
  absl::StatusOr<SessionRecord> record = DecodeSessionRecord(
      bytes, kSessionId, FixtureConfig(), kFingerprint, kMaxPendingTokens, kNow);
  ASSERT_TRUE(record.ok()) << record.status();
  ExpectRecordIsTheFixture(*record, FixtureSnapshotWithConstraint());

  absl::StatusOr<SessionRecordHeader> header = DecodeSessionRecordHeader(
      absl::string_view(bytes).substr(0, kMaxSessionRecordHeaderBytes), kSessionId, kFingerprint,
      kNow);
  ASSERT_TRUE(header.ok()) << header.status();
  ExpectHeaderIsTheFixture(*header);

  EXPECT_EQ(EncodeSessionRecord(FixtureRecord(FixtureSnapshotWithConstraint()), kFingerprint),
            bytes);
}

std::unique_ptr<SessionPersister> OpenPersister(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<SessionPersister>> persister = SessionPersister::Open(
      {.dir = dir}, FixtureConfig(), kFingerprint, kMaxPendingTokens);
  EXPECT_TRUE(persister.ok()) << persister.status();
  return persister.ok() ? *std::move(persister) : nullptr;
}

TEST(DiskFormatsTest, AStateDirectoryOfEitherRecordLoads) {
  for (const auto& [file, want] :
       {std::pair<std::string, SessionSnapshot>{"session_record_v1.bin", FixtureSnapshot()},
        {"session_record_v1_snapshot_v2.bin", FixtureSnapshotWithConstraint()}}) {
    SCOPED_TRACE(file);
    ScopedTempDir dir;
    const std::string path = dir.Join(kSessionId.value + ".session");
    WriteBytes(path, Fixture(file));
    std::unique_ptr<SessionPersister> persister = OpenPersister(dir.path());
    ASSERT_NE(persister, nullptr);

    const std::vector<SessionRecordHeader> index = persister->LoadIndex(kNow);
    ASSERT_EQ(index.size(), 1u);
    ExpectHeaderIsTheFixture(index[0]);
    absl::StatusOr<SessionRecordHeader> header = persister->ReadHeader(kSessionId, kNow);
    ASSERT_TRUE(header.ok()) << header.status();
    ExpectHeaderIsTheFixture(*header);
    absl::StatusOr<SessionRecord> record = persister->Read(kSessionId, kNow);
    ASSERT_TRUE(record.ok()) << record.status();
    ExpectRecordIsTheFixture(*record, want);
    const std::vector<SessionRecord> loaded = persister->Load(kNow);
    ASSERT_EQ(loaded.size(), 1u);
    ExpectRecordIsTheFixture(loaded[0], want);
  }
}

TEST(DiskFormatsTest, ThePersisterWritesTheRecordByteForByte) {
  ScopedTempDir dir;
  std::unique_ptr<SessionPersister> persister = OpenPersister(dir.path());
  ASSERT_NE(persister, nullptr);
  persister->Put(FixtureRecord(FixtureSnapshotWithConstraint()));
  ASSERT_TRUE(persister->Flush().ok());
  EXPECT_EQ(ReadBytes(dir.Join(kSessionId.value + ".session")),
            Fixture("session_record_v1_snapshot_v2.bin"));
}

TEST(DiskFormatsTest, ThePrefixStateLoadsAndIsWrittenAgainByteForByte) {
  ScopedTempDir dir;
  absl::StatusOr<std::unique_ptr<PrefixDisk>> disk = PrefixDisk::Open({.dir = dir.path()});
  ASSERT_TRUE(disk.ok()) << disk.status();
  std::vector<uint64_t> dropped;
  ASSERT_TRUE((*disk)->Put(kPrefixKey, kTenant, kPrefixTokens, FixturePrefixState(), dropped));
  const std::string path = dir.Join("0123456789abcdef.prefix");
  EXPECT_EQ(ReadBytes(path), Fixture("prefix_state.bin"));

  // The disk tier only reads files it wrote itself: the fixture replaces the one just written.
  WriteBytes(path, Fixture("prefix_state.bin"));
  std::optional<StateBlob> state = (*disk)->Take(kPrefixKey, kTenant, kPrefixTokens);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->position, FixturePrefixState().position);
  EXPECT_EQ(state->state, FixturePrefixState().state);
}

}  // namespace
}  // namespace linserve
