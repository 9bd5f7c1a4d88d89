// llamacpp_bench: llama.cpp's CPU backend on one GGUF model (bench/llamacpp/gguf_writer.py),
// driven through llama.h, the peer of cpu_bench's decode and prefill figures (issue 28).
//
// Built by bench/llamacpp/run.sh against the headers and prebuilt libraries that
// bench/llamacpp/install.sh installs from npm (node-llama-cpp), not by CMake: it links nothing
// of linserve's.
//
// What it does, in order:
//   check   prefill 16 tokens, then decode 8 tokens greedily; every logit must be finite.
//   setup   for each context C: a context with --batches' largest N sequences, each with its
//           own KV stream (llama.cpp's default, kv_unified off), sequence 0 prefilled to C
//           tokens and copied into the others (llama_memory_seq_cp).
//   rounds  --rounds times, in turn: for each C and each batch B, one untimed step, then --steps
//           timed steps of one token for each of B sequences in one llama_decode (logits for
//           every sequence); then one prefill of --prefill tokens into an empty sequence (one
//           llama_decode call, llama.cpp's default n_ubatch 512, logits of the last token only).
//           After each decode cell the softmax model's KV is cut back to C tokens; a recurrent
//           state's cost does not depend on its position, so RWKV's sequences simply go on.
// The logits of every timed cell's last step are checked finite.
//
// Output: one JSON object on stdout with each round's figures (tokens/s, summed over the
// batch); run.sh takes the medians. llama.cpp's own log goes to stderr only with --verbose.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

namespace {

struct Options {
  std::string model;     // Required: the GGUF file.
  std::string backends;  // Required: the directory of the libggml-cpu-*.so variants.
  int threads = 2;       // Default: 2 (linserve's cpu_bench on a 2-core host).
  std::vector<int> batches = {1, 8, 32};    // Default: 1,8,32.
  std::vector<int> contexts = {128, 4096};  // Default: 128,4096.
  int steps = 32;                           // Default: 32 timed decode steps per cell and round.
  int rounds = 5;                           // Default: 5.
  int prefill = 2048;                       // Default: 2048 prompt tokens.
  bool verbose = false;                     // Default: false (llama.cpp's log dropped).
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "llamacpp_bench: %s\n", message.c_str());
  std::exit(1);
}

int ParseInt(const std::string& flag, const std::string& text, int low, int high) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < low || value > high) {
    Die("--" + flag + "=" + text + " is not an integer in [" + std::to_string(low) + ", " +
        std::to_string(high) + "]");
  }
  return static_cast<int>(value);
}

std::vector<int> ParseList(const std::string& flag, const std::string& text, int low, int high) {
  std::vector<int> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    values.push_back(ParseInt(flag, text.substr(start, comma - start), low, high));
    start = comma + 1;
  }
  return values;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0) Die("unexpected argument " + arg);
    const std::string flag = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (flag == "model") {
      o.model = value;
    } else if (flag == "backends") {
      o.backends = value;
    } else if (flag == "threads") {
      o.threads = ParseInt(flag, value, 1, 1024);
    } else if (flag == "batches") {
      o.batches = ParseList(flag, value, 1, 256);
    } else if (flag == "contexts") {
      o.contexts = ParseList(flag, value, 1, 65536);
    } else if (flag == "steps") {
      o.steps = ParseInt(flag, value, 1, 4096);
    } else if (flag == "rounds") {
      o.rounds = ParseInt(flag, value, 1, 1000);
    } else if (flag == "prefill") {
      o.prefill = ParseInt(flag, value, 1, 65536);
    } else if (flag == "verbose") {
      o.verbose = true;
    } else {
      Die("unknown flag --" + flag);
    }
  }
  if (o.model.empty()) Die("--model=<file.gguf> is required");
  if (o.backends.empty()) Die("--backends=<directory of libggml-cpu-*.so> is required");
  return o;
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Token ids that are not the three special ones, from a fixed linear congruential sequence:
// the cost of a step does not depend on which tokens it reads.
class TokenSource {
 public:
  explicit TokenSource(int n_vocab) : n_vocab_(n_vocab) {}
  llama_token Next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return 3 + static_cast<llama_token>((state_ >> 33) % static_cast<uint64_t>(n_vocab_ - 3));
  }

 private:
  int n_vocab_;
  uint64_t state_ = 1;
};

struct Token {
  llama_token id;
  llama_pos pos;
  llama_seq_id seq;
  bool logits;
};

class Context {
 public:
  Context(llama_model* model, int threads, int n_seq, int n_ctx_seq, int n_batch)
      : n_batch_(n_batch) {
    llama_context_params p = llama_context_default_params();
    p.n_ctx = static_cast<uint32_t>(n_seq) * static_cast<uint32_t>(n_ctx_seq);
    p.n_batch = static_cast<uint32_t>(n_batch);
    p.n_seq_max = static_cast<uint32_t>(n_seq);
    p.n_threads = threads;
    p.n_threads_batch = threads;
    p.no_perf = true;
    ctx_ = llama_init_from_model(model, p);
    if (ctx_ == nullptr) Die("llama_init_from_model failed (n_seq " + std::to_string(n_seq) + ")");
    batch_ = llama_batch_init(n_batch, 0, 1);
  }
  ~Context() {
    llama_batch_free(batch_);
    llama_free(ctx_);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  llama_memory_t memory() const { return llama_get_memory(ctx_); }

  // One llama_decode over the tokens; returns its seconds (CPU compute is synchronous, and
  // llama_synchronize makes sure of it).
  double Decode(const std::vector<Token>& tokens) {
    if (static_cast<int>(tokens.size()) > n_batch_) Die("batch larger than n_batch");
    batch_.n_tokens = static_cast<int32_t>(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch_.token[i] = tokens[i].id;
      batch_.pos[i] = tokens[i].pos;
      batch_.n_seq_id[i] = 1;
      batch_.seq_id[i][0] = tokens[i].seq;
      batch_.logits[i] = tokens[i].logits ? 1 : 0;
    }
    const Clock::time_point start = Clock::now();
    const int32_t rc = llama_decode(ctx_, batch_);
    llama_synchronize(ctx_);
    const double seconds = Seconds(start);
    if (rc != 0) Die("llama_decode returned " + std::to_string(rc));
    return seconds;
  }

  // The logits of the last Decode's i-th token (negative: from the end), all finite, or exits.
  const float* Logits(int i, int n_vocab) {
    const float* logits = llama_get_logits_ith(ctx_, i);
    if (logits == nullptr) Die("no logits for token " + std::to_string(i));
    for (int v = 0; v < n_vocab; ++v) {
      if (!std::isfinite(logits[v])) {
        Die("logit " + std::to_string(v) + " of token " + std::to_string(i) + " is not finite");
      }
    }
    return logits;
  }

 private:
  int n_batch_;
  llama_context* ctx_ = nullptr;
  llama_batch batch_;
};

// Prefills sequence `seq` with `count` tokens from position `from`, in n_batch pieces.
void Prefill(Context& c, TokenSource& source, llama_seq_id seq, int from, int count, int n_batch) {
  for (int done = 0; done < count;) {
    const int piece = std::min(n_batch, count - done);
    std::vector<Token> tokens;
    for (int i = 0; i < piece; ++i) {
      tokens.push_back({source.Next(), from + done + i, seq, done + i + 1 == count});
    }
    c.Decode(tokens);
    done += piece;
  }
}

int RoundUp(int n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

void LogCallback(enum ggml_log_level, const char* text, void* verbose) {
  if (*static_cast<bool*>(verbose)) std::fputs(text, stderr);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

struct Cell {
  int context;
  int batch;
};

}  // namespace

int main(int argc, char** argv) {
  Options o = ParseOptions(argc, argv);
  llama_log_set(LogCallback, &o.verbose);
  ggml_backend_load_all_from_path(o.backends.c_str());
  llama_backend_init();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
  if (model == nullptr) Die("llama.cpp could not load " + o.model + " (rerun with --verbose)");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const bool recurrent = llama_model_is_recurrent(model);
  char desc[256];
  llama_model_desc(model, desc, sizeof(desc));
  TokenSource source(n_vocab);
  const int n_batch = 2048;  // llama.cpp's default logical batch
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());

  // The check: 16 prompt tokens, then 8 greedy tokens, every logit finite.
  auto prefill_context = std::make_unique<Context>(
      model, o.threads, 1, RoundUp(std::max(o.prefill, 24) + 1, 256), n_batch);
  Context& prefill = *prefill_context;
  Prefill(prefill, source, 0, 0, 16, n_batch);
  std::vector<llama_token> greedy;
  for (int i = 0; i < 8; ++i) {
    const float* logits = prefill.Logits(-1, n_vocab);
    greedy.push_back(static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits));
    prefill.Decode({{greedy.back(), 16 + i, 0, true}});
  }
  prefill.Logits(-1, n_vocab);

  // Setup: one context per length, sequence 0 prefilled and copied into the others.
  std::vector<std::unique_ptr<Context>> contexts;
  std::vector<std::vector<llama_pos>> positions;
  double setup_seconds = 0;
  for (int context : o.contexts) {
    const Clock::time_point start = Clock::now();
    const int n_ctx_seq = RoundUp(context + o.steps + 2, 256);
    auto c = std::make_unique<Context>(model, o.threads, max_batch, n_ctx_seq, n_batch);
    Prefill(*c, source, 0, 0, context, n_batch);
    for (int s = 1; s < max_batch; ++s) llama_memory_seq_cp(c->memory(), 0, s, -1, -1);
    contexts.push_back(std::move(c));
    positions.emplace_back(max_batch, context);
    setup_seconds += Seconds(start);
  }

  std::vector<Cell> cells;
  for (int context : o.contexts) {
    for (int batch : o.batches) cells.push_back({context, batch});
  }
  std::vector<std::vector<double>> decode_tps(cells.size());
  std::vector<double> prefill_tps;
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t k = 0; k < cells.size(); ++k) {
      const size_t ci = k / o.batches.size();
      Context& c = *contexts[ci];
      std::vector<llama_pos>& pos = positions[ci];
      const int batch = cells[k].batch;
      double seconds = 0;
      for (int step = 0; step <= o.steps; ++step) {
        std::vector<Token> tokens;
        for (int s = 0; s < batch; ++s) tokens.push_back({source.Next(), pos[s]++, s, true});
        const double t = c.Decode(tokens);
        if (step > 0) seconds += t;  // step 0 is the untimed warm-up
      }
      for (int s = 0; s < batch; ++s) c.Logits(s, n_vocab);
      decode_tps[k].push_back(static_cast<double>(batch) * o.steps / seconds);
      if (!recurrent) {
        for (int s = 0; s < batch; ++s) {
          if (!llama_memory_seq_rm(c.memory(), s, cells[k].context, -1)) {
            Die("llama_memory_seq_rm failed for sequence " + std::to_string(s));
          }
          pos[s] = cells[k].context;
        }
      }
    }
    llama_memory_clear(prefill.memory(), true);
    std::vector<Token> prompt;
    for (int i = 0; i < o.prefill; ++i) prompt.push_back({source.Next(), i, 0, i + 1 == o.prefill});
    double seconds = 0;
    for (int done = 0; done < o.prefill; done += n_batch) {
      const std::vector<Token> piece(prompt.begin() + done,
                                     prompt.begin() + std::min(o.prefill, done + n_batch));
      seconds += prefill.Decode(piece);
    }
    prefill.Logits(-1, n_vocab);
    prefill_tps.push_back(o.prefill / seconds);
  }

  std::printf("{\"model\": \"%s\", \"desc\": \"%s\", \"recurrent\": %s, \"threads\": %d, ",
              Escape(o.model).c_str(), Escape(desc).c_str(), recurrent ? "true" : "false",
              o.threads);
  std::printf("\"n_params\": %llu, \"size_bytes\": %llu, \"steps\": %d, \"prefill_tokens\": %d, ",
              static_cast<unsigned long long>(llama_model_n_params(model)),
              static_cast<unsigned long long>(llama_model_size(model)), o.steps, o.prefill);
  std::printf("\"system_info\": \"%s\", \"setup_seconds\": %.3f, \"check_tokens\": [",
              Escape(llama_print_system_info()).c_str(), setup_seconds);
  for (size_t i = 0; i < greedy.size(); ++i) std::printf("%s%d", i ? ", " : "", greedy[i]);
  std::printf("], \"decode\": [");
  for (size_t k = 0; k < cells.size(); ++k) {
    std::printf("%s{\"batch\": %d, \"context\": %d, \"tokens_per_s\": [", k ? ", " : "",
                cells[k].batch, cells[k].context);
    for (size_t r = 0; r < decode_tps[k].size(); ++r) {
      std::printf("%s%.3f", r ? ", " : "", decode_tps[k][r]);
    }
    std::printf("]}");
  }
  std::printf("], \"prefill_tokens_per_s\": [");
  for (size_t r = 0; r < prefill_tps.size(); ++r) {
    std::printf("%s%.3f", r ? ", " : "", prefill_tps[r]);
  }
  std::printf("]}\n");

  contexts.clear();
  prefill_context.reset();
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
