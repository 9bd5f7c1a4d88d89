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
//
// --sweep measures the context sweep of bench/run_scaling.sh instead of the rounds and the
// prefill: after the check, for each context C in increasing order, one context with as many
// sequences as the largest batch that fits --memory_budget_gib, sequence 0 prefilled to C and
// copied into the others; at each batch B one untimed step, then --steps timed steps; the
// figure is the median step in ms. The context is freed before the next one. A batch whose
// sessions would need more than the budget (softmax: B x the KV cache of C tokens at the bytes
// per token the shape gives, F16 K and V; recurrent: B x its state) is recorded as out of memory
// at that context and not measured at larger ones. A prefill still running after
// --prefill_cap_s is stopped: that context is recorded as capped, with the tokens prefilled and
// the seconds spent, and the sweep ends there (larger contexts take longer). Each measured
// point carries llama.cpp's own size of sequence 0's state after the prefill
// (llama_state_seq_get_size: its cells' K and V, or its recurrent state, plus their metadata).
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
  bool sweep = false;                       // Default: false (the rounds and the prefill).
  // Default: 0 = half of the memory available at the start (MemAvailable), as
  // bench/peer_softmax.py's budget. Only with --sweep.
  double memory_budget_gib = 0;
  double prefill_cap_s = 0;                 // Default: 0 = no cap. Only with --sweep.
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "llamacpp_bench: %s\n", message.c_str());
  std::exit(1);
}

double ParseDouble(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0) || value > 1e6) {
    Die("--" + flag + "=" + text + " is not a number in [0, 1e6]");
  }
  return value;
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
    } else if (flag == "sweep") {
      o.sweep = true;
    } else if (flag == "memory_budget_gib") {
      o.memory_budget_gib = ParseDouble(flag, value);
    } else if (flag == "prefill_cap_s") {
      o.prefill_cap_s = ParseDouble(flag, value);
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

  // llama.cpp's size of one sequence's saved state (llama_state_seq_get_size).
  size_t SequenceStateBytes(llama_seq_id seq) const { return llama_state_seq_get_size(ctx_, seq); }

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

// /proc/meminfo's MemAvailable in bytes, or exits.
double AvailableBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) Die("cannot read /proc/meminfo");
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  if (kib < 0) Die("no MemAvailable in /proc/meminfo");
  return static_cast<double>(kib) * 1024;
}

// An integer of the model file's metadata ("<architecture>.<key>"), or exits.
long MetaInt(const llama_model* model, const std::string& key) {
  char buf[128];
  if (llama_model_meta_val_str(model, "general.architecture", buf, sizeof(buf)) < 0) {
    Die("the model file has no general.architecture");
  }
  const std::string name = std::string(buf) + "." + key;
  if (llama_model_meta_val_str(model, name.c_str(), buf, sizeof(buf)) < 0) {
    Die("the model file has no " + name + " (a recurrent model other than RWKV?)");
  }
  return std::strtol(buf, nullptr, 10);
}

// What one session holds, from the model's shape and llama.cpp's default cache types: a
// softmax model's K and V in F16 (type_k, type_v), per layer and token; a recurrent model's
// state in F32 (RWKV: token_shift_count x n_embd shifted values and n_embd x wkv.head_size WKV
// values per layer) whatever the context.
struct SessionMemory {
  double bytes_per_token = 0;  // softmax
  double state_bytes = 0;      // recurrent
  double Bytes(int cells) const { return state_bytes + bytes_per_token * cells; }
};

SessionMemory SessionMemoryOf(const llama_model* model, bool recurrent) {
  const double layers = llama_model_n_layer(model);
  const double embd = llama_model_n_embd(model);
  SessionMemory m;
  if (recurrent) {
    m.state_bytes = layers * 4 *
                    (MetaInt(model, "token_shift_count") * embd +
                     embd * MetaInt(model, "wkv.head_size"));
  } else {
    const double head_dim = embd / llama_model_n_head(model);
    m.bytes_per_token = layers * 2 * llama_model_n_head_kv(model) * head_dim * 2;
  }
  return m;
}

// The context sweep (--sweep): JSON points as described at the top of this file.
std::string Sweep(const Options& o, llama_model* model, TokenSource& source, int n_vocab,
                  bool recurrent, const SessionMemory& memory, double budget) {
  std::vector<int> contexts = o.contexts;
  std::sort(contexts.begin(), contexts.end());
  std::vector<int> batches = o.batches;  // the batches still measured
  std::sort(batches.begin(), batches.end());
  const int n_batch = 2048;  // llama.cpp's default logical batch
  std::string points;
  auto add = [&points](const std::string& point) {
    points += (points.empty() ? "" : ", ") + point;
  };
  char buf[512];
  for (int context : contexts) {
    const int n_ctx_seq = RoundUp(context + o.steps + 2, 256);
    const double session_bytes = memory.Bytes(n_ctx_seq);
    std::vector<int> fit;
    for (int batch : batches) {
      if (batch * session_bytes <= budget) {
        fit.push_back(batch);
        continue;
      }
      std::snprintf(buf, sizeof(buf),
                    "{\"batch\": %d, \"context\": %d, \"memory_bytes\": %.0f, "
                    "\"out_of_memory\": true}",
                    batch, context, batch * session_bytes);
      add(buf);
      std::fprintf(stderr, "batch %d context %d: %.2f GiB > budget %.2f GiB\n", batch, context,
                   batch * session_bytes / (1 << 30), budget / (1 << 30));
    }
    batches = fit;
    if (fit.empty()) break;
    const int n_seq = fit.back();
    Context c(model, o.threads, n_seq, n_ctx_seq, n_batch);
    const Clock::time_point start = Clock::now();
    int done = 0;
    while (done < context && (o.prefill_cap_s <= 0 || Seconds(start) < o.prefill_cap_s)) {
      const int piece = std::min(n_batch, context - done);
      std::vector<Token> tokens;
      for (int i = 0; i < piece; ++i) {
        tokens.push_back({source.Next(), done + i, 0, done + i + 1 == context});
      }
      c.Decode(tokens);
      done += piece;
    }
    const double prefill_seconds = Seconds(start);
    if (done < context) {
      for (int batch : fit) {
        std::snprintf(buf, sizeof(buf),
                      "{\"batch\": %d, \"context\": %d, \"prefill_capped\": true, "
                      "\"prefill_tokens_done\": %d, \"prefill_seconds\": %.3f}",
                      batch, context, done, prefill_seconds);
        add(buf);
      }
      std::fprintf(stderr, "context %d: prefill stopped after %d tokens in %.0f s (cap %g s)\n",
                   context, done, prefill_seconds, o.prefill_cap_s);
      break;
    }
    const size_t reported = c.SequenceStateBytes(0);
    for (int s = 1; s < n_seq; ++s) llama_memory_seq_cp(c.memory(), 0, s, -1, -1);
    std::vector<llama_pos> pos(n_seq, context);
    for (int batch : fit) {
      std::vector<double> times;
      for (int step = 0; step <= o.steps; ++step) {
        std::vector<Token> tokens;
        for (int s = 0; s < batch; ++s) tokens.push_back({source.Next(), pos[s]++, s, true});
        const double t = c.Decode(tokens);
        if (step > 0) times.push_back(t);  // step 0 is the untimed warm-up
      }
      for (int s = 0; s < batch; ++s) c.Logits(s, n_vocab);
      std::sort(times.begin(), times.end());
      const size_t n = times.size();
      const double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
      std::snprintf(buf, sizeof(buf),
                    "{\"batch\": %d, \"context\": %d, \"step_ms\": %.4f, \"steps\": %d, "
                    "\"session_bytes\": %.0f, \"reported_state_bytes\": %zu, "
                    "\"prefill_seconds\": %.3f}",
                    batch, context, 1e3 * median, o.steps, memory.Bytes(context), reported,
                    prefill_seconds);
      add(buf);
      std::fprintf(stderr, "batch %d context %d: %.2f ms/step\n", batch, context, 1e3 * median);
      if (!recurrent) {
        for (int s = 0; s < batch; ++s) {
          if (!llama_memory_seq_rm(c.memory(), s, context, -1)) {
            Die("llama_memory_seq_rm failed for sequence " + std::to_string(s));
          }
          pos[s] = context;
        }
      }
    }
  }
  return points;
}

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

  std::printf("{\"model\": \"%s\", \"desc\": \"%s\", \"recurrent\": %s, \"threads\": %d, ",
              Escape(o.model).c_str(), Escape(desc).c_str(), recurrent ? "true" : "false",
              o.threads);
  std::printf("\"n_params\": %llu, \"size_bytes\": %llu, \"steps\": %d, ",
              static_cast<unsigned long long>(llama_model_n_params(model)),
              static_cast<unsigned long long>(llama_model_size(model)), o.steps);
  std::printf("\"system_info\": \"%s\", \"check_tokens\": [",
              Escape(llama_print_system_info()).c_str());
  for (size_t i = 0; i < greedy.size(); ++i) std::printf("%s%d", i ? ", " : "", greedy[i]);
  std::printf("], ");

  if (o.sweep) {
    prefill_context.reset();
    const SessionMemory memory = SessionMemoryOf(model, recurrent);
    const double budget =
        o.memory_budget_gib > 0 ? o.memory_budget_gib * (1 << 30) : AvailableBytes() / 2;
    const std::string points = Sweep(o, model, source, n_vocab, recurrent, memory, budget);
    std::printf("\"memory_budget_bytes\": %.0f, \"prefill_cap_s\": %g, ", budget, o.prefill_cap_s);
    if (recurrent) {
      std::printf("\"state_bytes_per_session\": %.0f, ", memory.state_bytes);
    } else {
      std::printf("\"kv_bytes_per_token\": %.0f, ", memory.bytes_per_token);
    }
    std::printf("\"points\": [%s]}\n", points.c_str());
    llama_model_free(model);
    llama_backend_free();
    return 0;
  }

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

  std::printf("\"prefill_tokens\": %d, \"setup_seconds\": %.3f, \"decode\": [", o.prefill,
              setup_seconds);
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
