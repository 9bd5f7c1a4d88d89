#include "server/engine/snapshot.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr char kFingerprint[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr int64_t kMaxPending = 100;

class SnapshotTest : public ::testing::Test {
 protected:
  SessionSnapshot Example() const {
    SessionSnapshot s;
    s.state.position = 5;
    s.state.state.resize(config_.StateFloatsPerSlot());
    for (size_t i = 0; i < s.state.state.size(); ++i) s.state.state[i] = 0.25f * i - 3;
    s.pending = {42};
    s.token_counts = {{1, 2}, {42, 1}, {200, 3}};
    s.num_tokens = 6;
    s.create_time = absl::FromUnixMicros(1700000000123456);
    return s;
  }
  absl::StatusOr<SessionSnapshot> Decode(const std::string& bytes) const {
    return DecodeSnapshot(bytes, config_, kFingerprint, kMaxPending);
  }

  ModelConfig config_ = TinyConfig();
};

TEST_F(SnapshotTest, RoundTrips) {
  const SessionSnapshot in = Example();
  const std::string bytes = EncodeSnapshot(in, kFingerprint);
  EXPECT_LE(static_cast<int64_t>(bytes.size()),
            MaxSnapshotBytes(config_, kFingerprint, kMaxPending));
  absl::StatusOr<SessionSnapshot> out = Decode(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->state.position, in.state.position);
  EXPECT_EQ(out->state.state, in.state.state);
  EXPECT_EQ(out->pending, in.pending);
  EXPECT_EQ(out->token_counts, in.token_counts);
  EXPECT_EQ(out->num_tokens, in.num_tokens);
  EXPECT_EQ(out->create_time, in.create_time);
}

TEST_F(SnapshotTest, RejectsEveryFlippedByte) {
  const std::string bytes = EncodeSnapshot(Example(), kFingerprint);
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string corrupt = bytes;
    corrupt[i] ^= 0x20;
    const absl::Status status = Decode(corrupt).status();
    EXPECT_FALSE(status.ok()) << "byte " << i;
    // Only the version field gives FAILED_PRECONDITION; anything else is corruption.
    if (i < 8 || i >= 12) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << i;
    }
  }
}

TEST_F(SnapshotTest, RejectsEveryTruncation) {
  const std::string bytes = EncodeSnapshot(Example(), kFingerprint);
  for (size_t n = 0; n < bytes.size(); n += 5) {
    EXPECT_EQ(Decode(bytes.substr(0, n)).status().code(), absl::StatusCode::kInvalidArgument)
        << n;
  }
  EXPECT_FALSE(Decode(bytes + "x").ok());
}

TEST_F(SnapshotTest, RejectsAnotherModelsSnapshot) {
  const std::string bytes =
      EncodeSnapshot(Example(), "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff");
  const absl::Status status = Decode(bytes).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model"));
}

TEST_F(SnapshotTest, RejectsAnotherFormatVersion) {
  std::string bytes = EncodeSnapshot(Example(), kFingerprint);
  bytes[8] = 2;
  const absl::Status status = Decode(bytes).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("version 2"));
}

TEST_F(SnapshotTest, RejectsIntactButInconsistentSnapshots) {
  SessionSnapshot counts = Example();
  counts.token_counts[0].second = 7;
  EXPECT_THAT(std::string(Decode(EncodeSnapshot(counts, kFingerprint)).status().message()),
              HasSubstr("token count"));

  SessionSnapshot position = Example();
  position.state.position = 4;
  EXPECT_THAT(std::string(Decode(EncodeSnapshot(position, kFingerprint)).status().message()),
              HasSubstr("disagree"));

  SessionSnapshot state = Example();
  state.state.state.pop_back();
  EXPECT_THAT(std::string(Decode(EncodeSnapshot(state, kFingerprint)).status().message()),
              HasSubstr("floats"));

  SessionSnapshot token = Example();
  token.pending = {260};
  EXPECT_THAT(std::string(Decode(EncodeSnapshot(token, kFingerprint)).status().message()),
              HasSubstr("vocabulary"));

  SessionSnapshot order = Example();
  std::swap(order.token_counts[0], order.token_counts[1]);
  EXPECT_EQ(Decode(EncodeSnapshot(order, kFingerprint)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SnapshotTest, RejectsMorePendingTokensThanThisServerAccepts) {
  SessionSnapshot s = Example();
  s.pending.assign(kMaxPending + 1, 7);
  s.num_tokens = s.state.position + kMaxPending + 1;
  s.token_counts = {{7, s.num_tokens}};
  const absl::Status status = Decode(EncodeSnapshot(s, kFingerprint)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_prompt_tokens"));
}

}  // namespace
}  // namespace linserve
