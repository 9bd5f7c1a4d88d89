#include "model/tokenizer/tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/load_tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tests/testing/sentencepiece_training.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kFffd[] = "\xEF\xBF\xBD";

std::unique_ptr<Tokenizer> ByteTokenizerFor(int32_t vocab_size) {
  ModelConfig c = TinyConfig();
  c.vocab_size = vocab_size;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(c, "");
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

std::string Repaired(std::string_view bytes) {
  std::string out;
  EXPECT_EQ(AppendRepairedUtf8(bytes, /*final=*/true, out), bytes.size());
  return out;
}

// ---- UTF-8 ----

TEST(Utf8Test, WellFormedText) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("h\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"),
            std::nullopt);
  EXPECT_EQ(Repaired("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(Utf8Test, FindsTheFirstIllFormedByte) {
  EXPECT_EQ(FirstInvalidUtf8("ab\x80"), 2u);            // stray continuation
  EXPECT_EQ(FirstInvalidUtf8("a\xC0\xAF"), 1u);         // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xE0\x80\xAF"), 0u);      // overlong, 3 bytes
  EXPECT_EQ(FirstInvalidUtf8("ok\xED\xA0\x80"), 2u);    // UTF-16 surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xF5"), 0u);
  EXPECT_EQ(FirstInvalidUtf8("abc\xE6\x97"), 3u);  // truncated at the end
}

TEST(Utf8Test, EachMaximalIllFormedSubpartBecomesOneReplacement) {
  // Unicode 15 §3.9, "U+FFFD Substitution of Maximal Subparts".
  EXPECT_EQ(Repaired("a\x80z"), absl::StrCat("a", kFffd, "z"));
  EXPECT_EQ(Repaired("\xC0\xAF"), absl::StrCat(kFffd, kFffd));
  EXPECT_EQ(Repaired("\xED\xA0\x80"), absl::StrCat(kFffd, kFffd, kFffd));
  EXPECT_EQ(Repaired("\xF4\x90\x80\x80"), absl::StrCat(kFffd, kFffd, kFffd, kFffd));
  EXPECT_EQ(Repaired("\xE6\x97"
                     "a"),
            absl::StrCat(kFffd, "a"));         // cut short, then ASCII
  EXPECT_EQ(Repaired("\xF0\x9F\x98"), kFffd);  // truncated at the end
  EXPECT_EQ(Repaired("\xF0\x9F\x98\xE6\x97\xA5"), absl::StrCat(kFffd, "\xE6\x97\xA5"));
}

TEST(Utf8Test, NotFinalHoldsBackATruncatedCharacter) {
  std::string out;
  EXPECT_EQ(AppendRepairedUtf8("ab\xF0\x9F", /*final=*/false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(AppendRepairedUtf8("\x80\xE6", /*final=*/false, out), 1u);
  EXPECT_EQ(out, kFffd);
}

// ---- Byte tokenizer ----

TEST(ByteTokenizerTest, EveryByteIsItsOwnId) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(260);
  EXPECT_EQ(t->vocab_size(), 260);
  const std::string text("A\0\xFF\xC3\xA9", 5);
  absl::StatusOr<std::vector<TokenId>> ids = t->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(65, 0, 255, 0xC3, 0xA9));
  for (int id = 0; id < 256; ++id) EXPECT_EQ(t->TokenBytes(id), std::string(1, char(id)));
}

TEST(ByteTokenizerTest, SpecialsHaveNoBytes) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(260);
  EXPECT_EQ(t->TokenBytes(256), "");
  EXPECT_EQ(t->TokenBytes(259), "");
  EXPECT_EQ(t->Decode({104, 256, 105, 259}).value(), "hi");
}

TEST(ByteTokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(260);
  absl::StatusOr<std::string> text = t->Decode({104, 105, 260});
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(),
              AllOf(HasSubstr("token id 260 at position 2"), HasSubstr("[0, 260)")));
  EXPECT_THAT(t->Decode({-1}).status().message(), HasSubstr("position 0"));
}

TEST(ByteTokenizerTest, DecodeRepairsIllFormedBytes) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(256);
  EXPECT_EQ(t->Decode({0x68, 0xFF, 0xE6, 0x97}).value(), absl::StrCat("h", kFffd, kFffd));
}

TEST(ByteTokenizerTest, VocabularyBelow256IsRejected) {
  ModelConfig c = TinyConfig();
  c.vocab_size = 200;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(c, "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), AllOf(HasSubstr("vocab_size >= 256"), HasSubstr("200")));
}

TEST(NoTokenizerTest, IdsStandForNoTextAndTextIsRefused) {
  ModelConfig c = TinyConfig();
  c.tokenizer = TokenizerKind::kNone;
  c.vocab_size = 50;  // no 256 byte ids needed
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(c, "/nonexistent");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->has_text());
  EXPECT_EQ((*t)->vocab_size(), 50);
  absl::StatusOr<std::vector<TokenId>> ids = (*t)->Encode("hello");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(),
              AllOf(HasSubstr("no tokenizer"), HasSubstr("\"none\""), HasSubstr("token ids")));
  EXPECT_FALSE((*t)->Encode("").ok());
  EXPECT_EQ((*t)->TokenBytes(7), "");
  EXPECT_EQ((*t)->Decode({0, 7, 49}).value(), "");
  EXPECT_THAT((*t)->Decode({50}).status().message(), HasSubstr("token id 50 at position 0"));
  EXPECT_TRUE(ByteTokenizerFor(256)->has_text());
}

// ---- Streaming detokenisation ----

TEST(StreamingDetokenizerTest, HoldsMultiByteCharactersUntilComplete) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(260);
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push('h'), "h");
  EXPECT_EQ(d.Push(0xC3), "");
  EXPECT_EQ(d.Push(0xA9), "\xC3\xA9");  // é
  EXPECT_EQ(d.Push(0xE6), "");
  EXPECT_EQ(d.Push(0x97), "");
  EXPECT_EQ(d.Push(256), "");               // a special in the middle changes nothing
  EXPECT_EQ(d.Push(0xA5), "\xE6\x97\xA5");  // 日
  EXPECT_EQ(d.Push(0xF0), "");
  EXPECT_EQ(d.Push(0x9F), "");
  EXPECT_EQ(d.Push(0x98), "");
  EXPECT_EQ(d.Push(0x80), "\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(d.Flush(), "");
}

TEST(StreamingDetokenizerTest, InvalidBytesAreReplacedAtOnce) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(256);
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push(0x80), kFffd);
  EXPECT_EQ(d.Push(0xE6), "");
  EXPECT_EQ(d.Push('x'), absl::StrCat(kFffd, "x"));  // the cut-short character can never finish
}

TEST(StreamingDetokenizerTest, FlushReplacesAnIncompleteCharacterAndResets) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(256);
  StreamingDetokenizer d(*t);
  EXPECT_EQ(d.Push('a'), "a");
  EXPECT_EQ(d.Push(0xF0), "");
  EXPECT_EQ(d.Push(0x9F), "");
  EXPECT_EQ(d.Flush(), kFffd);
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(d.Push(0xC3), "");  // nothing left over from before the flush
  EXPECT_EQ(d.Push(0xA9), "\xC3\xA9");
}

TEST(StreamingDetokenizerTest, StreamEqualsDecodeForRandomBytes) {
  std::unique_ptr<Tokenizer> t = ByteTokenizerFor(258);
  std::mt19937 rng(42);
  // Mostly well-formed text with multi-byte characters, plus random noise and specials.
  const std::vector<std::string> pieces = {
      "a", " ", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\xCE\xA9"};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TokenId> ids;
    for (int k = 0; k < 40; ++k) {
      const uint32_t r = rng() % 10;
      if (r < 7) {
        for (unsigned char c : pieces[rng() % pieces.size()]) ids.push_back(c);
      } else if (r < 9) {
        ids.push_back(static_cast<TokenId>(rng() % 256));
      } else {
        ids.push_back(256 + static_cast<TokenId>(rng() % 2));
      }
    }
    StreamingDetokenizer d(*t);
    std::string streamed;
    for (TokenId id : ids) {
      const std::string out = d.Push(id);
      ASSERT_EQ(FirstInvalidUtf8(out), std::nullopt) << "trial " << trial;
      streamed += out;
    }
    streamed += d.Flush();
    EXPECT_EQ(streamed, t->Decode(ids).value()) << "trial " << trial;
  }
}

// ---- SentencePiece ----

class SentencePieceTokenizerTest : public ::testing::Test {
 protected:
  static constexpr int32_t kVocab = 400;

  static void SetUpTestSuite() {
    dir_ = new ScopedTempDir();
    ASSERT_EQ(TrainSentencePiece(SentencePieceTestCorpus(), kVocab, dir_->Join("tokenizer.model")),
              "");
    ModelConfig c = TinyConfig();
    c.tokenizer = TokenizerKind::kSentencePiece;
    c.vocab_size = kVocab;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(c, dir_->path());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete dir_;
  }

  static std::vector<TokenId> Encode(std::string_view text) {
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<TokenId>{};
  }

  static ScopedTempDir* dir_;
  static Tokenizer* tokenizer_;
};

ScopedTempDir* SentencePieceTokenizerTest::dir_ = nullptr;
Tokenizer* SentencePieceTokenizerTest::tokenizer_ = nullptr;

TEST_F(SentencePieceTokenizerTest, VocabularyComesFromTheModel) {
  EXPECT_EQ(tokenizer_->vocab_size(), kVocab);
}

TEST_F(SentencePieceTokenizerTest, ControlPiecesHaveNoBytesAndUnknownHasItsSurface) {
  // SentencePiece's defaults: <unk> = 0, <s> = 1, </s> = 2.
  EXPECT_EQ(tokenizer_->TokenBytes(1), "");
  EXPECT_EQ(tokenizer_->TokenBytes(2), "");
  EXPECT_EQ(tokenizer_->TokenBytes(0), " \xE2\x81\x87 ");  // " ⁇ "
  EXPECT_EQ(tokenizer_->TokenBytes(kVocab), "");
  EXPECT_EQ(tokenizer_->TokenBytes(-1), "");
}

TEST_F(SentencePieceTokenizerTest, ByteFallbackPiecesAreRawBytes) {
  // With byte_fallback the trainer puts <0x00>..<0xFF> right after the three specials.
  for (int byte = 0; byte < 256; ++byte) {
    EXPECT_EQ(tokenizer_->TokenBytes(3 + byte), std::string(1, static_cast<char>(byte)));
  }
}

TEST_F(SentencePieceTokenizerTest, WordPiecesMapTheSpaceSymbolToASpace) {
  const std::vector<TokenId> ids = Encode("quick brown");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tokenizer_->TokenBytes(ids[0]).front(), ' ');
  for (TokenId id : ids) {
    EXPECT_EQ(tokenizer_->TokenBytes(id).find("\xE2\x96\x81"), std::string::npos);
  }
}

TEST_F(SentencePieceTokenizerTest, ConcatenatedTokenBytesReproduceTheText) {
  // Words from the corpus, characters it never saw (byte fallback) and emoji. SentencePiece's
  // dummy prefix adds the leading space.
  for (std::string_view text : {"hello world", "naïve café résumé", "日本語 テキスト",
                                "Ωμέγα λόγος", "unseen Жизнь and 🦀 crab", "emoji🎉 😀 dog"}) {
    const std::vector<TokenId> ids = Encode(text);
    std::string bytes;
    for (TokenId id : ids) bytes += tokenizer_->TokenBytes(id);
    EXPECT_EQ(bytes, absl::StrCat(" ", std::string(text)));
    EXPECT_EQ(tokenizer_->Decode(ids).value(), bytes);
  }
}

TEST_F(SentencePieceTokenizerTest, StreamingSplitsNoCharacter) {
  const std::string text = "unseen Жизнь 🦀 and 日本語";
  const std::vector<TokenId> ids = Encode(text);
  int held_back = 0;
  StreamingDetokenizer d(*tokenizer_);
  std::string streamed;
  for (TokenId id : ids) {
    const std::string out = d.Push(id);
    ASSERT_EQ(FirstInvalidUtf8(out), std::nullopt);
    if (out.size() < tokenizer_->TokenBytes(id).size()) ++held_back;
    streamed += out;
  }
  EXPECT_GT(held_back, 0) << "the text should need byte-fallback pieces";
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(streamed, absl::StrCat(" ", text));
}

TEST_F(SentencePieceTokenizerTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode("ok \xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("not valid UTF-8 (at byte 3)"));
}

}  // namespace
}  // namespace linserve
