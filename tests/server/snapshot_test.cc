#include "server/sessions/snapshot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "openssl/sha.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFingerprint[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
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
    EXPECT_EQ(Decode(bytes.substr(0, n)).status().code(), absl::StatusCode::kInvalidArgument) << n;
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
  for (const char version : {0, 3}) {
    std::string bytes = EncodeSnapshot(Example(), kFingerprint);
    bytes[8] = version;
    const absl::Status status = Decode(bytes).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("version ", static_cast<int>(version))));
  }
}

// ---- The constraint (version 2) ----

// `body` (a snapshot without its seal) sealed again, as anyone editing a snapshot can.
std::string Resealed(std::string body) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(), digest);
  body.append(reinterpret_cast<const char*>(digest), SHA256_DIGEST_LENGTH);
  return body;
}

std::string Unsealed(const std::string& bytes) {
  return bytes.substr(0, bytes.size() - SHA256_DIGEST_LENGTH);
}

const ConstraintState kConstraint = {
    .spec = {.kind = ConstraintKind::kGrammar, .text = "root ::= \"{\" [a-z]* \"}\""},
    .matcher = std::string("\x00\x01matcher\xff", 10)};

TEST_F(SnapshotTest, RoundTripsTheConstraint) {
  SessionSnapshot in = Example();
  EXPECT_FALSE(Decode(EncodeSnapshot(in, kFingerprint))->constraint.has_value());
  for (const ConstraintKind kind : {ConstraintKind::kJsonSchema, ConstraintKind::kJsonObject,
                                    ConstraintKind::kRegex, ConstraintKind::kGrammar}) {
    in.constraint = kConstraint;
    in.constraint->spec.kind = kind;
    if (kind == ConstraintKind::kJsonObject) in.constraint->spec.text.clear();
    const std::string bytes = EncodeSnapshot(in, kFingerprint);
    EXPECT_LE(static_cast<int64_t>(bytes.size()),
              MaxSnapshotBytes(config_, kFingerprint, kMaxPending));
    absl::StatusOr<SessionSnapshot> out = Decode(bytes);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->constraint, in.constraint) << ToString(kind);
    EXPECT_EQ(out->token_counts, in.token_counts);
  }
}

TEST_F(SnapshotTest, AVersion1SnapshotDecodesWithoutAConstraint) {
  // Version 1 is version 2 without has_constraint (the last byte before the seal, 0 here).
  std::string body = Unsealed(EncodeSnapshot(Example(), kFingerprint));
  ASSERT_EQ(body.back(), '\0');
  body[8] = 1;
  absl::StatusOr<SessionSnapshot> v1 = Decode(Resealed(body.substr(0, body.size() - 1)));
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_FALSE(v1->constraint.has_value());
  EXPECT_EQ(v1->token_counts, Example().token_counts);
  EXPECT_EQ(v1->pending, Example().pending);
  // A version 1 snapshot ends after its counts.
  const absl::Status status = Decode(Resealed(body)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("trailing bytes after the token counts"));
}

class SnapshotConstraintTest : public SnapshotTest {
 protected:
  // The body of Example() with kConstraint, and where its constraint's fields start.
  void SetUp() override {
    SessionSnapshot s = Example();
    s.constraint = kConstraint;
    body_ = Unsealed(EncodeSnapshot(s, kFingerprint));
    matcher_at_ = body_.size() - kConstraint.matcher.size() - 4;
    text_at_ = matcher_at_ - kConstraint.spec.text.size() - 4;
    kind_at_ = text_at_ - 1;
    has_at_ = kind_at_ - 1;
    ASSERT_EQ(body_[has_at_], 1);
    ASSERT_EQ(body_[kind_at_], static_cast<char>(ConstraintKind::kGrammar));
  }
  void ExpectRejected(const std::string& body, const std::string& message) const {
    const absl::Status status = Decode(Resealed(body)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }
  void PutU32(std::string& body, size_t at, uint32_t value) const {
    for (int i = 0; i < 4; ++i) body[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }

  std::string body_;
  size_t has_at_ = 0, kind_at_ = 0, text_at_ = 0, matcher_at_ = 0;
};

TEST_F(SnapshotConstraintTest, TheUneditedBodyDecodes) {
  absl::StatusOr<SessionSnapshot> out = Decode(Resealed(body_));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->constraint, kConstraint);
}

TEST_F(SnapshotConstraintTest, HasConstraintNeitherZeroNorOne) {
  std::string body = body_;
  body[has_at_] = 2;
  ExpectRejected(body, "has_constraint: 2 is neither 0 nor 1");
}

TEST_F(SnapshotConstraintTest, UnknownKind) {
  for (const int kind : {0, 5, 255}) {
    std::string body = body_;
    body[kind_at_] = static_cast<char>(kind);
    ExpectRejected(body, absl::StrCat("constraint kind: ", kind, " is not a known kind"));
  }
}

TEST_F(SnapshotConstraintTest, TextBeyondTheLimit) {
  std::string body = body_;
  PutU32(body, text_at_, kMaxSnapshotConstraintTextBytes + 1);
  ExpectRejected(body, absl::StrCat("constraint text: ", kMaxSnapshotConstraintTextBytes + 1,
                                    " bytes exceed the limit of ",
                                    kMaxSnapshotConstraintTextBytes));
}

TEST_F(SnapshotConstraintTest, MatcherBeyondTheLimit) {
  std::string body = body_;
  PutU32(body, matcher_at_, kMaxSnapshotMatcherBytes + 1);
  ExpectRejected(body, "constraint matcher: ");
  ExpectRejected(body, "exceed the limit");
}

TEST_F(SnapshotConstraintTest, LengthsPastTheEnd) {
  std::string body = body_;
  PutU32(body, matcher_at_, static_cast<uint32_t>(kConstraint.matcher.size() + 1));
  ExpectRejected(body, "truncated constraint matcher");
  body = body_;
  PutU32(body, text_at_, static_cast<uint32_t>(body.size()));
  ExpectRejected(body, "truncated constraint text");
  ExpectRejected(body_.substr(0, kind_at_), "truncated constraint kind");
  ExpectRejected(body_.substr(0, has_at_), "truncated has_constraint");
}

TEST_F(SnapshotConstraintTest, TrailingBytes) {
  ExpectRejected(body_ + "x", "trailing bytes after the constraint");
}

// ---- Range checks after the checksum ----
//
// Each test edits one field of a valid snapshot and encodes it again: EncodeSnapshot computes
// a fresh checksum over the edited bytes, as anyone editing a snapshot can, so only the field's
// own range check can reject it.

class SnapshotRangeTest : public SnapshotTest {
 protected:
  // Expects `s` (checksum intact) to be refused with INVALID_ARGUMENT naming `field` and
  // mentioning `problem`.
  void ExpectRejected(const SessionSnapshot& s, const std::string& field,
                      const std::string& problem) const {
    const absl::Status status = Decode(EncodeSnapshot(s, kFingerprint)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(field + ":"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(problem));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("checksum")));
  }
  // The index of z[f] of (layer, head) in the state layout.
  size_t ZIndex(int layer, int head, int f) const {
    const size_t head_floats = static_cast<size_t>(config_.feature_dim) * (config_.head_dim + 1);
    return (static_cast<size_t>(layer) * config_.n_heads + head) * head_floats +
           static_cast<size_t>(config_.feature_dim) * config_.head_dim + f;
  }
};

TEST_F(SnapshotRangeTest, ExampleAndRealisticExtremesAreAccepted) {
  // The edits below start from a snapshot that passes every check, including at the bounds.
  ASSERT_TRUE(Decode(EncodeSnapshot(Example(), kFingerprint)).ok());
  SessionSnapshot s = Example();
  s.state.state.front() = -kMaxSnapshotStateMagnitude;
  s.state.state.back() = kMaxSnapshotStateMagnitude;
  s.state.state[ZIndex(0, 0, 0)] = 0.0f;
  s.create_time = absl::UnixEpoch();
  EXPECT_TRUE(Decode(EncodeSnapshot(s, kFingerprint)).ok());
  s.create_time = absl::Now() + absl::Minutes(1);  // within the clock skew allowed
  EXPECT_TRUE(Decode(EncodeSnapshot(s, kFingerprint)).ok());
  s.state.position = kMaxSnapshotTokens - 1;
  s.num_tokens = kMaxSnapshotTokens;
  s.token_counts = {{1, kMaxSnapshotTokens - 1}, {42, 1}};
  EXPECT_TRUE(Decode(EncodeSnapshot(s, kFingerprint)).ok());
}

TEST(SnapshotRealStateTest, TheBundledModelsStatesAreAccepted) {
  // A real state after a long prompt of random tokens, read from the CPU backend, passes every
  // range check (and shows how far it stays from the magnitude bound).
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(LINSERVE_DEFAULT_MODEL_DIR);
  ASSERT_TRUE(model.ok()) << model.status();
  BackendOptions options;
  options.max_slots = 1;
  options.num_threads = 1;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(**model, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<SlotId> slot = (*backend)->AllocateSlot();
  ASSERT_TRUE(slot.ok());
  std::mt19937 random(7);
  std::vector<TokenId> prompt(2048);
  for (TokenId& t : prompt) t = static_cast<TokenId>(random() % (*model)->config.vocab_size);
  ASSERT_TRUE((*backend)->Prefill(*slot, prompt, {}).ok());

  SessionSnapshot s;
  ASSERT_TRUE((*backend)->ReadSlot(*slot, s.state).ok());
  float largest = 0;
  for (float x : s.state.state) largest = std::max(largest, std::fabs(x));
  std::printf("largest |state value| after %zu tokens: %g (bound %g)\n", prompt.size(), largest,
              kMaxSnapshotStateMagnitude);
  s.num_tokens = s.state.position;
  std::map<TokenId, int64_t> counts;
  for (TokenId t : prompt) ++counts[t];
  s.token_counts.assign(counts.begin(), counts.end());
  s.create_time = absl::Now();
  absl::StatusOr<SessionSnapshot> decoded =
      DecodeSnapshot(EncodeSnapshot(s, (*model)->fingerprint), (*model)->config,
                     (*model)->fingerprint, /*max_pending_tokens=*/0);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
}

TEST_F(SnapshotRangeTest, StateValueNaN) {
  SessionSnapshot s = Example();
  s.state.state[3] = std::numeric_limits<float>::quiet_NaN();
  ExpectRejected(s, "state[3] (layer 0, head 0, S[0][3])", "not finite");
}

TEST_F(SnapshotRangeTest, StateValueInfinite) {
  SessionSnapshot s = Example();
  s.state.state[ZIndex(1, 2, 5)] = std::numeric_limits<float>::infinity();
  ExpectRejected(s, absl::StrCat("state[", ZIndex(1, 2, 5), "] (layer 1, head 2, z[5])"),
                 "not finite");
}

TEST_F(SnapshotRangeTest, StateValueBeyondTheMagnitudeBound) {
  SessionSnapshot s = Example();
  s.state.state[7] = -1e38f;
  ExpectRejected(s, "state[7] (layer 0, head 0, S[0][7])", "exceeds the magnitude bound");
}

TEST_F(SnapshotRangeTest, StateNormaliserNegative) {
  SessionSnapshot s = Example();
  s.state.state[ZIndex(0, 1, 2)] = -0.5f;
  ExpectRejected(s, absl::StrCat("state[", ZIndex(0, 1, 2), "] (layer 0, head 1, z[2])"),
                 "negative");
}

// A session at position 0 starts from and leaves shared prefix states: an empty session's
// snapshot with its state edited (the checksum recomputed) must not import.
TEST_F(SnapshotRangeTest, StateNotInitialAtPositionZero) {
  SessionSnapshot s = Example();
  s.state.position = 0;
  s.state.state.assign(s.state.state.size(), 0.0f);
  s.pending = {};
  s.token_counts = {};
  s.num_tokens = 0;
  ASSERT_TRUE(Decode(EncodeSnapshot(s, kFingerprint)).ok());
  s.state.state.assign(s.state.state.size(), 0.7f);
  ExpectRejected(s, "state[0]", "at position 0, where the state must be the initial one");
  // With pending tokens (a request cancelled before it fed any) the same holds.
  s.state.state.assign(s.state.state.size(), 0.0f);
  s.state.state[9] = 1.0f;
  s.pending = {42};
  s.token_counts = {{42, 1}};
  s.num_tokens = 1;
  ExpectRejected(s, "state[9]", "at position 0");
}

TEST_F(SnapshotRangeTest, StateFloatCount) {
  SessionSnapshot s = Example();
  s.state.state.pop_back();
  ExpectRejected(s, "state", "floats, the model needs");
}

TEST_F(SnapshotRangeTest, CreateTimeBeforeTheEpoch) {
  SessionSnapshot s = Example();
  s.create_time = absl::UnixEpoch() - absl::Microseconds(1);
  ExpectRejected(s, "create_time", "before the epoch");
}

TEST_F(SnapshotRangeTest, CreateTimeInTheFuture) {
  SessionSnapshot s = Example();
  s.create_time = absl::FromUnixMicros(int64_t{1} << 62);  // the year 146 138
  ExpectRejected(s, "create_time", "in the future");
  s.create_time = absl::Now() + kMaxSnapshotClockSkew + absl::Minutes(1);
  ExpectRejected(s, "create_time", "in the future");
}

TEST_F(SnapshotRangeTest, NumTokensNegative) {
  SessionSnapshot s = Example();
  s.num_tokens = -1;
  ExpectRejected(s, "num_tokens", "outside [0, ");
}

TEST_F(SnapshotRangeTest, NumTokensBeyondTheLimit) {
  // Consistent with position, pending and counts, so only the bound can refuse it.
  SessionSnapshot s = Example();
  s.num_tokens = kMaxSnapshotTokens + 1;
  s.state.position = s.num_tokens - 1;
  s.token_counts = {{1, s.num_tokens - 1}, {42, 1}};
  ExpectRejected(s, "num_tokens", absl::StrCat("outside [0, ", kMaxSnapshotTokens, "]"));
}

TEST_F(SnapshotRangeTest, NumTokensNearInt64MaxEditedInPlace) {
  // The edit as an attacker makes it: 8 bytes overwritten and the SHA-256 recomputed.
  const std::string bytes = EncodeSnapshot(Example(), kFingerprint);
  std::string edited = bytes.substr(0, bytes.size() - SHA256_DIGEST_LENGTH);
  const size_t num_tokens_at = 8 + 4 + 4 + sizeof(kFingerprint) - 1 + 8;
  const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
  std::memcpy(edited.data() + num_tokens_at, &huge, sizeof(huge));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(edited.data()), edited.size(), digest);
  edited.append(reinterpret_cast<const char*>(digest), SHA256_DIGEST_LENGTH);
  const absl::Status status = Decode(edited).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("num_tokens: 9223372036854775806"));
}

TEST_F(SnapshotRangeTest, PositionNegative) {
  SessionSnapshot s = Example();
  s.state.position = -1;
  ExpectRejected(s, "position", "outside [0, num_tokens");
}

TEST_F(SnapshotRangeTest, PositionBeyondNumTokens) {
  SessionSnapshot s = Example();
  s.state.position = s.num_tokens + 1;
  ExpectRejected(s, "position", "outside [0, num_tokens = 6]");
}

TEST_F(SnapshotRangeTest, PositionPastTheLearnedPositionTable) {
  config_.position = PositionEmbedding::kLearned;
  config_.max_position = 4;
  SessionSnapshot s = Example();  // position 5
  ExpectRejected(s, "position", "max_position 4");
  config_.max_position = 5;
  EXPECT_TRUE(Decode(EncodeSnapshot(s, kFingerprint)).ok());
}

TEST_F(SnapshotRangeTest, NumTokensDisagreesWithPositionAndPending) {
  SessionSnapshot s = Example();
  s.state.position = 4;  // 4 + 1 pending != 6
  ExpectRejected(s, "num_tokens", "differs from position 4 + 1 pending tokens");
}

TEST_F(SnapshotRangeTest, PendingTokenOutsideTheVocabulary) {
  SessionSnapshot s = Example();
  s.pending = {260};
  s.token_counts = {{1, 2}, {200, 3}, {259, 1}};
  ExpectRejected(s, "pending[0]", "token id 260 is outside the vocabulary [0, 260)");
  s.pending = {-1};
  ExpectRejected(s, "pending[0]", "token id -1 is outside the vocabulary");
}

TEST_F(SnapshotRangeTest, TokenCountsMoreEntriesThanTheVocabulary) {
  SessionSnapshot s = Example();
  s.token_counts.clear();
  for (TokenId t = 0; t <= config_.vocab_size; ++t) s.token_counts.emplace_back(t, 1);
  ExpectRejected(s, "token_counts", "more than the vocabulary's 260");
}

TEST_F(SnapshotRangeTest, TokenCountsTokenOutsideTheVocabulary) {
  SessionSnapshot s = Example();
  s.token_counts[2].first = 260;
  ExpectRejected(s, "token_counts[2].token", "token id 260 is outside the vocabulary");
}

TEST_F(SnapshotRangeTest, TokenCountsNotAscending) {
  SessionSnapshot s = Example();
  std::swap(s.token_counts[0], s.token_counts[1]);
  ExpectRejected(s, "token_counts[1].token", "does not ascend");
  s = Example();
  s.token_counts[1].first = s.token_counts[0].first;  // a duplicate
  ExpectRejected(s, "token_counts[1].token", "does not ascend");
}

TEST_F(SnapshotRangeTest, TokenCountsCountBelowOne) {
  SessionSnapshot s = Example();
  s.token_counts[1].second = 0;
  ExpectRejected(s, "token_counts[1].count", "outside [1, ");
}

TEST_F(SnapshotRangeTest, TokenCountsCountAboveNumTokens) {
  SessionSnapshot s = Example();
  s.token_counts[0].second = 7;
  ExpectRejected(s, "token_counts[0].count", "outside [1, 6]");
}

TEST_F(SnapshotRangeTest, TokenCountsSumBelowNumTokens) {
  SessionSnapshot s = Example();
  s.token_counts[2].second = 2;
  ExpectRejected(s, "token_counts", "sum to 5, not num_tokens (6)");
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
