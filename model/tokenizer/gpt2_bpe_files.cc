#include "model/tokenizer/gpt2_bpe_files.h"

#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/format/file_io.h"
#include "model/format/json_parse.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

using Json = nlohmann::json;

// Ids above this cannot be in a config's vocabulary (config.json's vocab_size limit).
constexpr int64_t kMaxTokenId = (int64_t{1} << 20) - 1;

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order. Returns, for each code point below 0x144, its byte or -1.
std::array<int, 0x144> UnicodeToByte() {
  std::array<int, 0x144> table;
  table.fill(-1);
  int next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[printable ? b : next++] = b;
  }
  return table;
}

// The UTF-8 spelling of the character that stands for byte b.
std::string ByteSpelling(int b, const std::array<int, 0x144>& to_byte) {
  for (int cp = 0; cp < 0x144; ++cp) {
    if (to_byte[cp] != b) continue;
    std::string out;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
  }
  return "";
}

// The bytes a token spelt in the byte-to-unicode alphabet stands for, or false when it has a
// character outside it. `token` is well-formed UTF-8 (a JSON string).
bool TokenToBytes(std::string_view token, const std::array<int, 0x144>& to_byte,
                  std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const uint8_t lead = static_cast<uint8_t>(token[i]);
    int cp;
    if (lead < 0x80) {
      cp = lead;
      i += 1;
    } else if (lead >= 0xC0 && lead < 0xE0 && i + 1 < token.size()) {
      cp = ((lead & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // three- and four-byte characters are all above U+0143
    }
    if (cp >= 0x144 || to_byte[cp] < 0) return false;
    bytes += static_cast<char>(to_byte[cp]);
  }
  return true;
}

// The vocabulary and merges as the files spell them, before checking.
struct Spelling {
  std::string vocab_source;  // "vocab.json" or "tokenizer.json model.vocab", for errors
  std::vector<std::pair<std::string, int64_t>> vocab;
  absl::flat_hash_set<std::string> specials;
  struct Merge {
    std::string left, right, where;  // where: "line 3" / "model.merges[2]"
  };
  std::string merges_source;
  std::vector<Merge> merges;
};

absl::StatusOr<Gpt2BpeVocab> Build(const Spelling& s) {
  const std::array<int, 0x144> to_byte = UnicodeToByte();
  Gpt2BpeVocab v;
  absl::flat_hash_map<std::string, TokenId> ids;  // spelling -> id
  ids.reserve(s.vocab.size());
  std::vector<bool> used;
  std::string bytes;
  for (const auto& [token, id] : s.vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat(s.vocab_source, ": token \"", token,
                                                     "\" has id ", id, ", outside [0, ",
                                                     kMaxTokenId, "]"));
    }
    const size_t index = static_cast<size_t>(id);
    if (index >= v.token_bytes.size()) {
      v.token_bytes.resize(index + 1);
      used.resize(index + 1);
    }
    if (used[index]) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.vocab_source, ": id ", id, " is given to two tokens (one is \"", token, "\")"));
    }
    used[index] = true;
    if (!ids.emplace(token, static_cast<TokenId>(id)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.vocab_source, ": token \"", token, "\" is listed twice"));
    }
    if (s.specials.contains(token)) continue;  // stands for no bytes
    if (!TokenToBytes(token, to_byte, bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.vocab_source, ": token \"", token, "\" (id ", id,
          ") has a character outside GPT-2's byte-to-unicode alphabet and is not special"));
    }
    v.token_bytes[index] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    const std::string spelling = ByteSpelling(b, to_byte);
    const auto it = ids.find(spelling);
    if (it == ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: has no token for byte 0x%02X (\"%s\"); a byte-level BPE "
                          "vocabulary has one for each of the 256 bytes",
                          s.vocab_source, b, spelling));
    }
    v.byte_ids[b] = it->second;
  }
  v.merges.reserve(s.merges.size());
  for (const Spelling::Merge& m : s.merges) {
    Gpt2BpeVocab::Merge merge;
    const std::string merged = m.left + m.right;
    for (const auto& [part, id] : {std::pair<const std::string*, TokenId*>{&m.left, &merge.left},
                                   {&m.right, &merge.right},
                                   {&merged, &merge.merged}}) {
      const auto it = ids.find(*part);
      if (it == ids.end() || s.specials.contains(*part)) {
        return absl::InvalidArgumentError(
            absl::StrCat(s.merges_source, " ", m.where, ": merge \"", m.left, " ", m.right,
                         "\" needs token \"", *part, "\", which is not in the vocabulary"));
      }
      *id = it->second;
    }
    v.merges.push_back(merge);
  }
  return v;
}

absl::StatusOr<Json> ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseStrictJsonObject(*text, path);
}

absl::Status ReadVocabObject(const Json& vocab, Spelling& s) {
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(s.vocab_source, ": token \"", token,
                                                     "\" must map to an integer id, not ",
                                                     DescribeJson(id)));
    }
    s.vocab.emplace_back(token, id.get<int64_t>());
  }
  return absl::OkStatus();
}

// "a b": exactly one space.
bool SplitMerge(std::string_view line, Spelling::Merge& m) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return false;
  }
  m.left = std::string(line.substr(0, space));
  m.right = std::string(line.substr(space + 1));
  return true;
}

absl::Status CheckField(const Json& object, const char* object_name, const char* field, bool ok,
                        const char* want, const std::string& path) {
  if (ok) return absl::OkStatus();
  const std::string is = object.contains(field) ? DescribeJson(object[field]) : "absent";
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", object_name, field, " is ", is,
                                                 "; linserve's gpt2_bpe tokenizer needs ", want));
}

}  // namespace

absl::StatusOr<Gpt2BpeVocab> ReadGpt2VocabAndMerges(const std::string& vocab_path,
                                                    const std::string& merges_path) {
  Spelling s;
  s.vocab_source = vocab_path;
  s.merges_source = merges_path;
  absl::StatusOr<Json> vocab = ReadJson(vocab_path);
  if (!vocab.ok()) return vocab.status();
  if (absl::Status st = ReadVocabObject(*vocab, s); !st.ok()) return st;
  if (vocab->contains(kGpt2EndOfText)) s.specials.insert(kGpt2EndOfText);

  absl::StatusOr<std::string> merges = ReadFileToString(merges_path);
  if (!merges.ok()) return merges.status();
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin < merges->size();) {
    size_t end = merges->find('\n', begin);
    if (end == std::string::npos) end = merges->size();
    lines.push_back(std::string_view(*merges).substr(begin, end - begin));
    begin = end + 1;
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (i == 0 && line.starts_with("#version")) continue;
    Spelling::Merge m;
    m.where = absl::StrCat("line ", i + 1);
    if (!SplitMerge(line, m)) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, " line ", i + 1, ": \"", std::string(line.substr(0, 64)),
                       "\" is not a merge (two tokens separated by one space)"));
    }
    s.merges.push_back(std::move(m));
  }
  return Build(s);
}

absl::StatusOr<Gpt2BpeVocab> ReadHfTokenizerJson(const std::string& path) {
  absl::StatusOr<Json> file = ReadJson(path);
  if (!file.ok()) return file.status();
  const Json& j = *file;
  auto null_or_absent = [](const Json& o, const char* f) {
    return !o.contains(f) || o[f].is_null();
  };
  if (!j.contains("model") || !j["model"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": has no \"model\" object"));
  }
  const Json& model = j["model"];
  if (absl::Status st =
          CheckField(model, "model.", "type", !model.contains("type") || model["type"] == "BPE",
                     "\"BPE\"", path);
      !st.ok()) {
    return st;
  }
  for (const char* f : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const bool ok = null_or_absent(model, f) || (model[f].is_string() && model[f] == "");
    if (absl::Status st = CheckField(model, "model.", f, ok, "null", path); !st.ok()) return st;
  }
  if (absl::Status st = CheckField(
          model, "model.", "ignore_merges",
          null_or_absent(model, "ignore_merges") || model["ignore_merges"] == false, "false", path);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          CheckField(j, "", "normalizer", null_or_absent(j, "normalizer"), "null", path);
      !st.ok()) {
    return st;
  }
  const bool byte_level = j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object() &&
                          j["pre_tokenizer"].value("type", Json()) == "ByteLevel";
  if (absl::Status st =
          CheckField(j, "", "pre_tokenizer", byte_level, "an object of type \"ByteLevel\"", path);
      !st.ok()) {
    return st;
  }
  const Json& pre = j["pre_tokenizer"];
  for (const auto& [f, want] :
       {std::pair<const char*, bool>{"add_prefix_space", false}, {"use_regex", true}}) {
    const bool ok = !pre.contains(f) || pre[f] == want;
    if (absl::Status st = CheckField(pre, "pre_tokenizer.", f, ok, want ? "true" : "false", path);
        !st.ok()) {
      return st;
    }
  }

  Spelling s;
  s.vocab_source = absl::StrCat(path, " model.vocab");
  s.merges_source = absl::StrCat(path, " model.merges");
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model.vocab must be an object"));
  }
  if (absl::Status st = ReadVocabObject(model["vocab"], s); !st.ok()) return st;
  if (j.contains("added_tokens")) {
    if (!j["added_tokens"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": added_tokens must be an array"));
    }
    for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const Json& t = j["added_tokens"][i];
      const std::string where = absl::StrCat(path, ": added_tokens[", i, "]");
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
          !t.contains("content") || !t["content"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " must be an object with an integer id and a string content"));
      }
      const std::string content = t["content"].get<std::string>();
      if (!t.contains("special") || t["special"] != true) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " (\"", content,
            "\") is not special; linserve's gpt2_bpe tokenizer splits text on no added tokens"));
      }
      const int64_t id = t["id"].get<int64_t>();
      if (model["vocab"].contains(content)) {
        if (model["vocab"][content] != id) {
          return absl::InvalidArgumentError(absl::StrCat(where, " (\"", content, "\") has id ", id,
                                                         " but model.vocab gives it ",
                                                         DescribeJson(model["vocab"][content])));
        }
      } else {
        s.vocab.emplace_back(content, id);
      }
      s.specials.insert(content);
    }
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model.merges must be an array"));
  }
  const Json& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    Spelling::Merge merge;
    merge.where = absl::StrCat("[", i, "]");
    bool ok = false;
    if (m.is_string()) {
      ok = SplitMerge(m.get<std::string>(), merge);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merge.left = m[0].get<std::string>();
      merge.right = m[1].get<std::string>();
      ok = !merge.left.empty() && !merge.right.empty();
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": model.merges[", i, "] is ", DescribeJson(m),
                       "; a merge is \"a b\" (one space) or an array of two non-empty strings"));
    }
    s.merges.push_back(std::move(merge));
  }
  return Build(s);
}

absl::StatusOr<Gpt2BpeVocab> ReadGpt2BpeFiles(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code ec;
  if (std::filesystem::exists(dir / kHfTokenizerFile, ec)) {
    return ReadHfTokenizerJson((dir / kHfTokenizerFile).string());
  }
  const std::string vocab = (dir / kGpt2VocabFile).string();
  const std::string merges = (dir / kGpt2MergesFile).string();
  for (const std::string& f : {vocab, merges}) {
    if (!std::filesystem::exists(f, ec)) {
      return absl::NotFoundError(
          absl::StrCat(f, ": no such file; config.json says tokenizer \"gpt2_bpe\", which needs ",
                       kHfTokenizerFile, " or ", kGpt2VocabFile, " + ", kGpt2MergesFile));
    }
  }
  return ReadGpt2VocabAndMerges(vocab, merges);
}

}  // namespace linserve
