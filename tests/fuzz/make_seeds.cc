// Writes the fuzz targets' seed corpora, tests/fuzz/corpus/<target>/, from real inputs: the bundled
// model's config.json and safetensors header, files our writers produce (a random model of
// FuzzConfig's shape, snapshots of a session), Generate requests as clients send them, and GBNF
// grammars.
//   make_seeds SOURCE_DIR           (re)writes SOURCE_DIR/tests/fuzz/corpus
//   make_seeds SOURCE_DIR --check   exits 1 if the committed corpus differs from what it would
//                                   write (ctest fuzz_seeds_current)
// Deterministic: the same sources give the same bytes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "linserve/v1/generate.pb.h"
#include "model/format/config.h"
#include "model/format/safetensors.h"
#include "server/sessions/snapshot.h"
#include "tests/fuzz/fuzz_inputs.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve::fuzz {
namespace {

namespace fs = std::filesystem;
using Corpus =
    std::map<std::string, std::map<std::string, std::string>>;  // target -> file -> bytes

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "make_seeds: %s\n", message.c_str());
  std::exit(2);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void AddSafetensors(const fs::path& source, std::map<std::string, std::string>& out) {
  // One tensor of every dtype, and metadata.
  const std::vector<float> f = {0.0f, -1.5f, 3.25f, 65504.0f, 1e-8f, -0.0f};
  const std::vector<int64_t> i = {0, 1, -1, 127, -128, 1};
  const std::vector<int64_t> u = {0, 1, 255, 7, 1, 0};
  const std::vector<int64_t> b = {1, 0};
  std::vector<SafetensorsWriteTensor> tensors;
  for (Dtype d : {Dtype::kF64, Dtype::kF32, Dtype::kF16, Dtype::kBF16}) {
    tensors.push_back({std::string("t.") + std::string(DtypeName(d)), d, {2, 3}, f, {}});
  }
  for (Dtype d : {Dtype::kI64, Dtype::kI32, Dtype::kI16, Dtype::kI8}) {
    tensors.push_back({std::string("t.") + std::string(DtypeName(d)), d, {6}, {}, i});
  }
  tensors.push_back({"t.U8", Dtype::kU8, {3, 2}, {}, u});
  tensors.push_back({"t.BOOL", Dtype::kBool, {2}, {}, b});
  tensors.push_back({"scalar", Dtype::kF32, {}, {f.data(), 1}, {}});
  tensors.push_back({"empty", Dtype::kF32, {0, 4}, {}, {}});
  auto every_dtype = SerializeSafetensors(tensors, {{"format", "pt"}, {"source", "make_seeds"}});
  if (!every_dtype.ok()) Die(every_dtype.status().ToString());
  out["every_dtype.safetensors"] = *every_dtype;

  // A whole model as WriteModelDirectory writes it, in BF16 and F32.
  ScopedTempDir dir;
  const ModelWeights weights = MakeRandomWeights(FuzzConfig(), 1);
  for (Dtype d : {Dtype::kBF16, Dtype::kF32}) {
    const std::string model_dir = (fs::path(dir.path()) / DtypeName(d)).string();
    if (absl::Status s = WriteModelDirectory(model_dir, FuzzConfig(), weights, d); !s.ok()) {
      Die(s.ToString());
    }
    out["model_" + std::string(DtypeName(d)) + ".safetensors"] =
        ReadFile(fs::path(model_dir) / "model.safetensors");
  }

  // The bundled model's length prefix and header (its 20 MB of data left out).
  const std::string bundled =
      ReadFile(source / "models" / "shakespeare-linear" / "model.safetensors");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(bundled[k]);
  out["bundled_header_only.safetensors"] = bundled.substr(0, 8 + n);
}

void AddConfigs(const fs::path& source, std::map<std::string, std::string>& out) {
  out["bundled_config.json"] = ReadFile(source / "models" / "shakespeare-linear" / "config.json");
  out["tiny.json"] = ModelConfigToJson(TinyConfig());
  ModelConfig c = FuzzConfig();
  c.norm = NormPlacement::kPost;
  c.activation = Activation::kRelu;
  c.feature_map = FeatureMap::kFavorPlus;
  c.feature_dim = 16;
  c.position = PositionEmbedding::kLearned;
  c.max_position = 128;
  c.bias = false;
  c.tie_embeddings = false;
  out["post_favor_learned.json"] = ModelConfigToJson(c);
  c = FuzzConfig();
  c.activation = Activation::kGeluTanh;
  c.feature_map = FeatureMap::kExp;
  c.position = PositionEmbedding::kNone;
  c.tokenizer = TokenizerKind::kSentencePiece;
  c.vocab_size = 1000;
  out["sentencepiece_exp.json"] = ModelConfigToJson(c);
}

void AddSnapshots(std::map<std::string, std::string>& out) {
  const ModelConfig config = FuzzConfig();
  SessionSnapshot fresh;
  fresh.state.state.assign(config.StateFloatsPerSlot(), 0.0f);
  fresh.create_time = absl::FromUnixSeconds(1700000000);
  out["fresh_session"] = SnapshotInput(EncodeSnapshot(fresh, kFingerprint));

  // After a prompt "ab" (BOS 97 98) and a sampled token 99 not yet fed: position 3, pending 99.
  SessionSnapshot mid;
  mid.state.position = 3;
  for (int64_t k = 0; k < config.StateFloatsPerSlot(); ++k) {
    mid.state.state.push_back(0.125f * static_cast<float>(k) - 0.5f);
  }
  mid.pending = {99};
  mid.token_counts = {{97, 1}, {98, 1}, {99, 1}, {256, 1}};
  mid.num_tokens = 4;
  mid.create_time = absl::FromUnixMicros(1700000000123456);
  const std::string encoded = EncodeSnapshot(mid, kFingerprint);
  out["mid_session"] = SnapshotInput(encoded);
  out["mid_session_raw"] = std::string(1, '\1') + encoded;  // checksum included, as exported
  // The same session as version 1 wrote it: no has_constraint byte before the checksum (the
  // input's byte 0, then the 8-byte magic, then the u32 version).
  std::string v1 = SnapshotInput(encoded);
  v1.pop_back();
  v1.replace(1 + 8, 4, std::string("\x01\x00\x00\x00", 4));
  out["mid_session_v1"] = v1;

  // The same session in the middle of a constrained document (snapshot version 2).
  mid.constraint.emplace();
  mid.constraint->spec.kind = ConstraintKind::kGrammar;
  mid.constraint->spec.text = "root ::= \"{\" [a-z]+ \"}\"";
  mid.constraint->matcher = std::string("\x01\x00\x02", 3);
  out["mid_session_constraint"] = SnapshotInput(EncodeSnapshot(mid, kFingerprint));
}

void AddRequests(std::map<std::string, std::string>& out) {
  v1::GenerateRequest text;
  text.set_text("ROMEO:");
  text.set_max_new_tokens(16);
  out["text"] = text.SerializeAsString();

  v1::GenerateRequest full;
  full.mutable_token_ids()->add_ids(72);
  full.mutable_token_ids()->add_ids(105);
  full.mutable_token_ids()->add_ids(257);
  full.set_session_id("s-0123456789abcdef");
  full.set_max_new_tokens(8);
  v1::SamplingParams* s = full.mutable_sampling();
  s->set_temperature(0.8f);
  s->set_top_k(40);
  s->set_top_p(0.95f);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(0.25f);
  s->set_seed(7);
  full.add_stop("\n\n");
  full.add_stop("END");
  full.add_stop_token_ids(257);
  full.set_ignore_eos(true);
  full.set_top_logprobs(3);
  out["token_ids_all_fields"] = full.SerializeAsString();

  // The fields of issue 41: logit biases, n choices kept on a session, a scored prompt.
  v1::GenerateRequest choices;
  choices.mutable_token_ids()->add_ids(72);
  choices.mutable_token_ids()->add_ids(105);
  choices.set_session_id("s-0123456789abcdef");
  choices.set_max_new_tokens(4);
  choices.set_n(3);
  choices.set_session_choice(1);
  // One entry: a map's serialized order is not fixed, the committed seed must be.
  (*choices.mutable_sampling()->mutable_logit_bias())[72] = -100.0f;
  out["choices_logit_bias"] = choices.SerializeAsString();
  v1::GenerateRequest scored;
  scored.set_text("ROMEO:");
  scored.set_max_new_tokens(0);
  scored.set_prompt_logprobs(2);
  out["scored_prompt"] = scored.SerializeAsString();

  v1::GenerateRequest utf8;
  utf8.set_text("¿Dónde estás? ☃ 日本");
  utf8.mutable_sampling()->set_temperature(0.0f);
  out["text_utf8_greedy"] = utf8.SerializeAsString();
}

// GBNF grammars as clients write them: a JSON grammar, and one of every construct.
void AddGrammars(std::map<std::string, std::string>& out) {
  out["json.gbnf"] = R"(root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*
)";
  out["constructs.gbnf"] = R"(# every construct once
root ::= "ab\x41\u00e9\U0001F600\t" [a-z0-9_-]+ [^"\]\[] . (x | y)* x? y+ "z"{2} "w"{1,3} "v"{2,}
x ::= "x" |
  "X"
y ::= ( "y"
  | "Y" ) # comment
)";
  out["date.gbnf"] = "root ::= [0-9]{4} \"-\" [0-9]{2} \"-\" [0-9]{2}\n";
}

Corpus MakeCorpus(const fs::path& source) {
  Corpus corpus;
  AddSafetensors(source, corpus["safetensors_fuzzer"]);
  AddConfigs(source, corpus["config_fuzzer"]);
  AddSnapshots(corpus["snapshot_fuzzer"]);
  AddRequests(corpus["request_fuzzer"]);
  AddGrammars(corpus["grammar_fuzzer"]);
  return corpus;
}

int Run(const fs::path& source, bool check) {
  const fs::path root = source / "tests" / "fuzz" / "corpus";
  const Corpus corpus = MakeCorpus(source);
  int differences = 0;
  for (const auto& [target, files] : corpus) {
    const fs::path dir = root / target;
    if (check) {
      std::set<std::string> present;
      if (fs::is_directory(dir)) {
        for (const auto& entry : fs::directory_iterator(dir)) {
          present.insert(entry.path().filename().string());
        }
      }
      for (const auto& [name, bytes] : files) {
        if (!present.count(name) || ReadFile(dir / name) != bytes) {
          std::fprintf(stderr, "make_seeds: %s/%s is missing or stale\n", target.c_str(),
                       name.c_str());
          ++differences;
        }
        present.erase(name);
      }
      for (const std::string& name : present) {
        std::fprintf(stderr, "make_seeds: %s/%s is not generated\n", target.c_str(), name.c_str());
        ++differences;
      }
      continue;
    }
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& [name, bytes] : files) {
      std::ofstream(dir / name, std::ios::binary) << bytes;
    }
    std::printf("make_seeds: %zu seeds in %s\n", files.size(), dir.string().c_str());
  }
  if (differences) {
    std::fprintf(stderr, "make_seeds: regenerate with `make_seeds %s` (tests/fuzz/README.md)\n",
                 source.string().c_str());
  }
  return differences ? 1 : 0;
}

}  // namespace
}  // namespace linserve::fuzz

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::string(argv[2]) == "--check";
  if (argc != 2 && !check) {
    std::fprintf(stderr, "usage: make_seeds SOURCE_DIR [--check]\n");
    return 2;
  }
  return linserve::fuzz::Run(argv[1], check);
}
