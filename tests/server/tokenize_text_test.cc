// TokenizeText and the tokenizers' EncodeAtMost: untrusted text costs what the request limits
// allow, not what the text's size would: too many bytes are refused before any tokenizing,
// and tokenizing stops soon after max_prompt_tokens is passed, while every text within the
// limits still gets exactly Encode's ids.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/sentencepiece_model.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "server/engine/request.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/sentencepiece_training.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// Records what it was asked to encode and delegates to a ByteTokenizer.
class SpyTokenizer final : public Tokenizer {
 public:
  int32_t vocab_size() const override { return bytes_.vocab_size(); }
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override {
    ++calls;
    last_max_tokens = max_tokens;
    return bytes_.EncodeAtMost(text, max_tokens);
  }
  std::string TokenBytes(TokenId id) const override { return bytes_.TokenBytes(id); }

  mutable int calls = 0;
  mutable size_t last_max_tokens = 0;

 private:
  ByteTokenizer bytes_{260};
};

RequestLimits SmallLimits() {
  RequestLimits limits;
  limits.max_prompt_tokens = 100;
  limits.max_prompt_bytes = 1000;
  return limits;
}

TEST(TokenizeTextTest, TooManyBytesAreRefusedBeforeAnyTokenizing) {
  SpyTokenizer tokenizer;
  const absl::StatusOr<std::vector<TokenId>> ids =
      TokenizeText(std::string(1001, 'a'), "prompt.text", tokenizer, SmallLimits());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(),
            "prompt.text: 1001 bytes exceed the limit of 1000 (max_prompt_bytes)");
  EXPECT_EQ(tokenizer.calls, 0);
}

TEST(TokenizeTextTest, TooManyTokensAreRefusedWithTheTokenLimitPassedDown) {
  SpyTokenizer tokenizer;
  const absl::StatusOr<std::vector<TokenId>> ids =
      TokenizeText(std::string(1000, 'a'), "text", tokenizer, SmallLimits());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(),
            "text: has more tokens than the limit of 100 (max_prompt_tokens)");
  EXPECT_EQ(tokenizer.calls, 1);
  EXPECT_EQ(tokenizer.last_max_tokens, 100u);
}

TEST(TokenizeTextTest, TextAtBothLimitsIsTokenized) {
  SpyTokenizer tokenizer;
  RequestLimits limits = SmallLimits();
  limits.max_prompt_bytes = 100;
  const absl::StatusOr<std::vector<TokenId>> ids =
      TokenizeText(std::string(100, 'a'), "prompt.text", tokenizer, limits);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, std::vector<TokenId>(100, 'a'));
}

TEST(TokenizeTextTest, TokenizerErrorsNameTheField) {
  ScopedTempDir dir;
  ASSERT_EQ(TrainSentencePiece(SentencePieceTestCorpus(), 400, dir.Join("tokenizer.model")), "");
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> sp =
      SentencePieceTokenizer::Load(dir.Join("tokenizer.model"), 400);
  ASSERT_TRUE(sp.ok()) << sp.status();
  const absl::Status status = TokenizeText("ok \xC3(", "prompt.text", **sp, SmallLimits()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("prompt.text: cannot be tokenized"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("UTF-8"));
}

TEST(RequestLimitsTest, MaxPromptBytesDefaultsToSixteenBytesPerToken) {
  RequestLimits limits;
  EXPECT_EQ(limits.max_prompt_bytes, kDefaultPromptBytesPerToken * limits.max_prompt_tokens);
  limits.max_prompt_bytes = 0;
  EXPECT_THAT(std::string(ValidateRequestLimits(limits).message()), HasSubstr("max_prompt_bytes"));
}

// ---- ByteTokenizer ----

TEST(ByteTokenizerEncodeAtMostTest, ReadsAtMostOneTokenPastTheLimit) {
  const ByteTokenizer tokenizer(260);
  const std::string text = "abcdef";
  EXPECT_EQ(tokenizer.EncodeAtMost(text, 6).value(), tokenizer.Encode(text).value());
  EXPECT_EQ(tokenizer.EncodeAtMost(text, 100).value(), tokenizer.Encode(text).value());
  EXPECT_EQ(tokenizer.EncodeAtMost(text, 5).value().size(), 6u);
  EXPECT_EQ(tokenizer.EncodeAtMost(text, 2).value(), (std::vector<TokenId>{'a', 'b', 'c'}));
  EXPECT_EQ(tokenizer.EncodeAtMost(text, 0).value(), (std::vector<TokenId>{'a'}));
  EXPECT_TRUE(tokenizer.EncodeAtMost("", 0).value().empty());
}

// ---- SentencePieceTokenizer, real model ----

class SentencePieceEncodeAtMostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScopedTempDir();
    ASSERT_EQ(TrainSentencePiece(SentencePieceTestCorpus(), 400, dir_->Join("tokenizer.model")),
              "");
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> sp =
        SentencePieceTokenizer::Load(dir_->Join("tokenizer.model"), 400);
    ASSERT_TRUE(sp.ok()) << sp.status();
    tokenizer_ = sp->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }
  // The test corpus (mixed scripts, byte fallback), one line after another, until `bytes`.
  static std::string LongText(size_t bytes) {
    const std::string corpus = SentencePieceTestCorpus();
    std::string text;
    while (text.size() < bytes) text += corpus;
    // Cut at a character boundary.
    size_t end = bytes;
    while ((static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
    text.resize(end);
    return text;
  }

  static ScopedTempDir* dir_;
  static SentencePieceTokenizer* tokenizer_;
};

ScopedTempDir* SentencePieceEncodeAtMostTest::dir_ = nullptr;
SentencePieceTokenizer* SentencePieceEncodeAtMostTest::tokenizer_ = nullptr;

TEST_F(SentencePieceEncodeAtMostTest, TextWithinTheLimitGetsExactlyEncodesIds) {
  // Long enough to be counted in several chunks first.
  const std::string text = LongText(5 * SentencePieceTokenizer::kCountChunkBytes);
  const std::vector<TokenId> whole = tokenizer_->Encode(text).value();
  ASSERT_GT(whole.size(), 1000u);
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, whole.size()).value(), whole);
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, whole.size() + 1000).value(), whole);
  // One token short: the limit decides on the exact count, whatever the chunks' sum was.
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, whole.size() - 1).value().size(), whole.size());

  const std::string short_text = "hello world, naïve café 日本語 🦀";
  const std::vector<TokenId> short_ids = tokenizer_->Encode(short_text).value();
  EXPECT_EQ(tokenizer_->EncodeAtMost(short_text, short_ids.size()).value(), short_ids);
  EXPECT_EQ(tokenizer_->EncodeAtMost(short_text, 2).value(),
            std::vector<TokenId>(short_ids.begin(), short_ids.begin() + 3));
}

TEST_F(SentencePieceEncodeAtMostTest, TextFarOverTheLimitGivesLimitPlusOneIds) {
  const std::string text = LongText(5 * SentencePieceTokenizer::kCountChunkBytes);
  for (size_t limit : {size_t{0}, size_t{1}, size_t{100}, size_t{20000}}) {
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->EncodeAtMost(text, limit);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->size(), limit + 1) << limit;
  }
}

TEST_F(SentencePieceEncodeAtMostTest, InvalidUtf8IsStillAnError) {
  std::string text = LongText(3 * SentencePieceTokenizer::kCountChunkBytes);
  text += "\xC3(";
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- SentencePieceTokenizer, a model that records the work it is given ----

// One id per `bytes_per_token` bytes of text (so a text's count is known); records how many
// bytes it encoded in all and in its largest call, and whether every call was whole UTF-8
// characters.
class RecordingModel final : public SentencePieceModel {
 public:
  struct Record {
    size_t total_bytes = 0;
    size_t largest_call = 0;
    bool split_a_character = false;
  };
  RecordingModel(size_t bytes_per_token, Record* record)
      : bytes_per_token_(bytes_per_token), record_(record) {}

  int vocab_size() const override { return 300; }
  bool Encode(std::string_view text, std::vector<int>& ids, std::string&) const override {
    record_->total_bytes += text.size();
    record_->largest_call = std::max(record_->largest_call, text.size());
    if (!text.empty() && (static_cast<uint8_t>(text.front()) & 0xC0) == 0x80) {
      record_->split_a_character = true;
    }
    ids.assign((text.size() + bytes_per_token_ - 1) / bytes_per_token_, 7);
    return true;
  }
  std::vector<std::string> PieceBytes() const override {
    return std::vector<std::string>(300, "x");
  }

 private:
  const size_t bytes_per_token_;
  Record* const record_;
};

TEST(SentencePieceWorkTest, AHugeTextCostsWorkForTheLimitNotForItsSize) {
  constexpr size_t kChunk = SentencePieceTokenizer::kCountChunkBytes;
  const std::string text = [] {
    std::string t;
    while (t.size() < (size_t{16} << 20)) t += "word ";  // 16 MiB of words
    return t;
  }();
  RecordingModel::Record record;
  std::unique_ptr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::FromModel("recording", std::make_unique<RecordingModel>(4, &record));

  // 16 MiB is about 4M tokens; with a limit of 1000 the first chunk decides.
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer->EncodeAtMost(text, 1000);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 1001u);
  EXPECT_LE(record.total_bytes, kChunk + 8);
  EXPECT_LE(record.largest_call, 2 * kChunk);

  // A limit of 100k tokens (about 400 KB of this text) reads about that much, in chunks.
  record = {};
  ids = tokenizer->EncodeAtMost(text, 100000);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 100001u);
  EXPECT_GE(record.total_bytes, 400000u);
  EXPECT_LE(record.total_bytes, 400000u + 2 * kChunk);
  EXPECT_LE(record.largest_call, 2 * kChunk);
}

TEST(SentencePieceWorkTest, ATextWithoutSpacesIsCutBetweenCharacters) {
  constexpr size_t kChunk = SentencePieceTokenizer::kCountChunkBytes;
  // A leading "a", then é (two bytes) with no space anywhere: characters start at odd
  // offsets, so a cut at a round offset would split one.
  std::string text = "a";
  while (text.size() < 8 * kChunk) text += "\xC3\xA9";
  RecordingModel::Record record;
  std::unique_ptr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::FromModel("recording", std::make_unique<RecordingModel>(3, &record));
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer->EncodeAtMost(text, 50000);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 50001u);
  EXPECT_FALSE(record.split_a_character);
  EXPECT_LE(record.largest_call, 2 * kChunk);
}

TEST(SentencePieceWorkTest, ATextThatFitsIsEncodedWholeAfterCounting) {
  constexpr size_t kChunk = SentencePieceTokenizer::kCountChunkBytes;
  const std::string text(3 * kChunk, 'a');  // 49152 tokens at 4 bytes per token
  RecordingModel::Record record;
  std::unique_ptr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::FromModel("recording", std::make_unique<RecordingModel>(4, &record));
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer->EncodeAtMost(text, 60000);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 3 * kChunk / 4);
  EXPECT_EQ(record.largest_call, text.size());  // the exact, whole-text encoding
  EXPECT_EQ(record.total_bytes, 2 * text.size());
}

}  // namespace
}  // namespace linserve
