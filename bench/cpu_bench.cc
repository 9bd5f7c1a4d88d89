// cpu_bench: the CPU engine on the 125M shape (d_model 768, 12 layers, 12 heads × 64, d_ff 3072,
// vocab 32000, tied head, random fp32 weights), each figure against its floor
// (docs/architecture.md §7):
//   bytes that must move / measured read bandwidth, and FLOPs / measured GEMM peak,
// both measured in this same run; the prefill GEMMs against the compute peak of the weight format
// they run (bench/compute_peak.h: register-only fp32 FMA and int8 dot loops); and against the
// PyTorch reference's recurrent step measured by bench/peer_torch.py in the same session
// (--peer_json). bench/run_cpu.sh runs both, and llama.cpp, for bench/results/cpu.md.
//
// Sections: machine floors and compute peaks; our packed Linear vs OpenBLAS sgemm over the
// model's weights; our packed Linear at the prefill pass's rows in fp32, bf16 and int8 against
// each format's compute peak; decode tokens/s at batch 1, 8, 32, 128; prefill of 2048 tokens
// chunked and token by token (batch-1 decode steps); decode latency at positions 100, 1 000 and
// 10 000. Output: markdown on stdout, and with --json_out the same figures as JSON (documented
// where Main writes it; bench/report/cpu_peer.py reads it).
//
// --weight_precision packs every weight matrix (the engine's and the Linear section's) in that
// format (docs/architecture.md §4.9); the bandwidth floors count its bytes per weight.
//
// With --contexts, only the context sweep of issue 19 runs instead (bench/run_scaling.sh): the
// decode step at each context and batch, over real states (one session prefilled up to each
// context in turn and forked into the batch), written as JSON to --json_out, whose tables and
// pictures bench/report draws.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_support.h"
#include "bench/compute_peak.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/threads.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/backend/weight_precision.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, peer_json, "",
          "JSON from bench/peer_torch.py, measured in the same session; adds the peer ratios.");
ABSL_FLAG(int32_t, threads, 0, "Threads for everything measured, [0, 1024]; 0 = every core.");
ABSL_FLAG(int32_t, chunk_size, 64, "Prefill chunk size of the chunked-prefill figure.");
ABSL_FLAG(std::string, contexts, "",
          "Comma-separated contexts in [1, 1048576]: run only the context sweep (decode step at "
          "each context and --context_batches) and write it to --json_out.");
ABSL_FLAG(std::string, context_batches, "1,32", "Batch sizes of the context sweep, in [1, 1024].");
// Default: "" (the main mode writes no JSON; --contexts requires a file).
ABSL_FLAG(std::string, json_out, "",
          "JSON file of the figures: the context sweep's (required with --contexts), or the main "
          "mode's machine floors, compute peaks, Linear, decode, prefill and latency figures.");
// Default: auto (fp32 on the CPU).
ABSL_FLAG(std::string, weight_precision, "auto",
          "Weight matrices as auto (fp32), fp32, bf16, fp16 or int8 in everything measured.");

namespace linserve {
namespace {

using bench::Clock;
using bench::Median;
using bench::Must;
using bench::Seconds;

// --weight_precision as the CPU backend runs it; exits on a value it does not know.
WeightPrecision Precision() {
  absl::StatusOr<WeightPrecision> p = ParseWeightPrecision(absl::GetFlag(FLAGS_weight_precision));
  if (!p.ok()) {
    std::fprintf(stderr, "cpu_bench: --%s\n", std::string(p.status().message()).c_str());
    std::exit(2);
  }
  return CpuWeightPrecision(*p);
}

// Bytes one weight of `precision` takes once packed (int8: 1 + a 4-byte scale per 32).
double BytesPerWeight(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kBf16:
    case WeightPrecision::kFp16:
      return 2.0;
    case WeightPrecision::kInt8:
      return 1.0 + 4.0 / 32;
    case WeightPrecision::kAuto:
    case WeightPrecision::kFp32:
      break;
  }
  return 4.0;
}

double Best(int repeats, const std::function<void()>& f) {
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto t = Clock::now();
    f();
    best = std::min(best, Seconds(t));
  }
  return best;
}

ModelConfig Config125M() {
  ModelConfig c;
  c.vocab_size = 32000;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.head_dim = 64;
  c.feature_dim = 64;
  c.d_ff = 3072;
  c.norm = NormPlacement::kPre;
  c.activation = Activation::kGelu;
  c.feature_map = FeatureMap::kEluPlusOne;
  c.position = PositionEmbedding::kSinusoidal;
  c.tie_embeddings = true;
  return c;
}

// ---- Machine floors ------------------------------------------------------------------------

// STREAM-like read: every thread sums its contiguous share with four AVX2 accumulators, the
// access pattern of a weight stream.
__attribute__((target("avx2"))) float ReadSum(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

struct Floors {
  double read_gbs = 0, triad_gbs = 0;
  double blas_gflops = 0, packed_gflops = 0;
  double peak_gflops() const { return std::max(blas_gflops, packed_gflops); }
};

// Runs body(t) on `threads` dedicated threads released together; returns the wall time from
// the release to the last one finishing. (Not ParallelFor: a bandwidth figure needs every
// thread streaming at once, not whichever threads happen to claim the work.)
double OnAllThreads(int threads, const std::function<void(int)>& body) {
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) {
      }
      body(t);
    });
  }
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& t : pool) t.join();
  return Seconds(start);
}

struct Bandwidth {
  double read_gbs = 0, triad_gbs = 0;
};

Bandwidth MeasureBandwidth(int threads) {
  const int64_t n = int64_t{1} << 27;  // 512 MiB per array: far beyond the caches
  const int64_t share = (n / threads) & ~int64_t{31};
  cpu::FloatBuffer a(n), b(n), c(n);
  OnAllThreads(threads, [&](int t) {
    for (int64_t i = t * share; i < (t + 1) * share; ++i) a[i] = b[i] = c[i] = 1.0f;
  });
  std::vector<float> sums(static_cast<size_t>(threads));
  double read = 1e300, triad = 1e300;
  for (int repeat = 0; repeat < 5; ++repeat) {
    read = std::min(read, OnAllThreads(threads, [&](int t) {
                      sums[t] = ReadSum(a.data() + t * share, share);
                    }));
    triad = std::min(triad, OnAllThreads(threads, [&](int t) {
                       for (int64_t i = t * share; i < (t + 1) * share; ++i) {
                         c[i] = a[i] + 1.5f * b[i];
                       }
                     }));
  }
  for (float sum : sums) {  // uses the sums, so the reads cannot be optimised away
    if (sum != static_cast<float>(share)) std::fprintf(stderr, "cpu_bench: bad read sum\n");
  }
  // STREAM's convention for triad: 2 reads + 1 write counted.
  return {4.0 * share * threads / read / 1e9, 12.0 * share * threads / triad / 1e9};
}

Floors MeasureFloors(int threads) {
  Floors f;
  const Bandwidth bw = MeasureBandwidth(threads);
  f.read_gbs = bw.read_gbs;
  f.triad_gbs = bw.triad_gbs;

  // GEMM peak: OpenBLAS on a large square product, and our packed kernel on the same shape.
  const int g = 2048;
  std::vector<float> x(static_cast<size_t>(g) * g, 0.01f), w(x.size(), 0.01f), y(x.size());
  cpu::SetBlasThreads(threads);
  const double blas = Best(5, [&] {
    cpu::Gemm(cpu::Transpose::kNo, cpu::Transpose::kYes, g, g, g, 1.0f, x.data(), g, w.data(), g,
              0.0f, y.data(), g);
  });
  cpu::SetBlasThreads(1);
  f.blas_gflops = 2.0 * g * g * g / blas / 1e9;
  const cpu::PackedMatrix packed = cpu::PackedMatrix::Pack(w.data(), g, g);
  const double own = Best(5, [&] {
    cpu::Linear(x.data(), g, g, packed, nullptr, cpu::Activation::kNone,
                cpu::LinearOutput::kStore, y.data(), g, threads);
  });
  f.packed_gflops = 2.0 * g * g * g / own / 1e9;
  return f;
}

// ---- Linear: packed kernel vs OpenBLAS over the model's weights ------------------------------

struct LinearRow {
  int rows;
  double packed_ms, blas_ms, flops, bytes;
};

struct Matrix {
  const Tensor* w;
  cpu::PackedMatrix packed;
};

// The model's 73 weight matrices (6 per layer and the tied head), packed in `precision`.
std::vector<Matrix> PackWeights(const Model& model, WeightPrecision precision) {
  std::vector<Matrix> ms;
  for (const LayerWeights& l : model.weights.layers) {
    for (const Tensor* t :
         {&l.At("attn.q_proj.weight"), &l.At("attn.k_proj.weight"), &l.At("attn.v_proj.weight"),
          &l.At("attn.o_proj.weight"), &l.At("ffn.fc1.weight"), &l.At("ffn.fc2.weight")}) {
      ms.push_back({t, cpu::PackedMatrix::Pack(t->data.data(), t->shape[0], t->shape[1],
                                               CpuWeightFormat(precision))});
    }
  }
  const Tensor& head = model.weights.token_embedding;
  ms.push_back({&head, cpu::PackedMatrix::Pack(head.data.data(), head.shape[0], head.shape[1],
                                               CpuWeightFormat(precision))});
  return ms;
}

// One Linear per matrix of `ms` over the same `rows` × in_features input.
void LinearOverAll(const std::vector<Matrix>& ms, int rows, const float* x, float* y,
                   int threads) {
  for (const Matrix& m : ms) {
    cpu::Linear(x, rows, m.w->shape[1], m.packed, nullptr, cpu::Activation::kNone,
                cpu::LinearOutput::kStore, y, m.w->shape[0], threads);
  }
}

std::vector<LinearRow> CompareLinear(const Model& model, int threads) {
  const std::vector<Matrix> ms = PackWeights(model, Precision());
  std::vector<LinearRow> out;
  for (int rows : {1, 8, 32, 128}) {
    std::vector<float> x(static_cast<size_t>(rows) * 3072, 0.01f);
    std::vector<float> y(static_cast<size_t>(rows) * 32000);
    LinearRow r{rows, 0, 0, 0, 0};
    for (const Matrix& m : ms) {
      r.flops += 2.0 * rows * m.w->shape[0] * m.w->shape[1];
      r.bytes += static_cast<double>(m.packed.bytes());
    }
    const int repeats = rows >= 32 ? 3 : 5;
    r.packed_ms =
        1e3 * Best(repeats, [&] { LinearOverAll(ms, rows, x.data(), y.data(), threads); });
    cpu::SetBlasThreads(threads);
    r.blas_ms = 1e3 * Best(repeats, [&] {
      for (const Matrix& m : ms) {
        const int out_f = static_cast<int>(m.w->shape[0]), in_f = static_cast<int>(m.w->shape[1]);
        cpu::Gemm(cpu::Transpose::kNo, cpu::Transpose::kYes, rows, out_f, in_f, 1.0f, x.data(),
                  in_f, m.w->data.data(), in_f, 0.0f, y.data(), out_f);
      }
    });
    cpu::SetBlasThreads(1);
    out.push_back(r);
  }
  return out;
}

// ---- Prefill GEMMs against each weight format's compute peak ------------------------------

// The peak the kernels of `precision` run against (compute_peak.h): int8 multiplies in
// integers; fp32, bf16 and fp16 all run fp32 FMAs.
double FormatPeak(const bench::ComputePeaks& peaks, WeightPrecision precision) {
  return CpuWeightFormat(precision) == cpu::WeightFormat::kInt8 ? peaks.int8_gops
                                                                 : peaks.fp32_gflops;
}

struct FormatLinearRow {
  WeightPrecision precision;
  int rows;
  double ms, ops;
};

// Our packed Linear over all 73 matrices at the prefill pass's rows (the layers' GEMMs of one
// 512-token pass, plus the head's as if it ran over the pass too), in fp32, bf16 and int8.
std::vector<FormatLinearRow> PrefillLinear(const Model& model, int threads) {
  const int rows = CpuBackend::kPrefillPassRows;
  std::vector<float> x(static_cast<size_t>(rows) * 3072, 0.01f);
  std::vector<float> y(static_cast<size_t>(rows) * 32000);
  std::vector<FormatLinearRow> out;
  for (WeightPrecision p :
       {WeightPrecision::kFp32, WeightPrecision::kBf16, WeightPrecision::kInt8}) {
    const std::vector<Matrix> ms = PackWeights(model, p);
    FormatLinearRow r{p, rows, 0, 0};
    for (const Matrix& m : ms) r.ops += 2.0 * rows * m.w->shape[0] * m.w->shape[1];
    r.ms = 1e3 * Best(3, [&] { LinearOverAll(ms, rows, x.data(), y.data(), threads); });
    out.push_back(r);
  }
  return out;
}

// ---- The engine ----------------------------------------------------------------------------

struct Work {
  double weight_bytes = 0;      // projections + head, read once per forward pass
  double head_bytes = 0;        // the head's share of weight_bytes
  double layer_flops = 0;       // per token, projections + FFN
  double head_flops = 0;        // per token whose logits are computed
  double attention_flops = 0;   // per token, recurrent form
  double state_bytes = 0;       // per session
};

Work WorkOf(const ModelConfig& c) {
  Work w;
  const double d = c.d_model, hd = static_cast<double>(c.n_heads) * c.head_dim, ff = c.d_ff;
  const double layer_params = 3 * d * hd + hd * d + 2 * d * ff;
  const double weight = BytesPerWeight(Precision());
  w.weight_bytes = weight * (c.n_layers * layer_params + static_cast<double>(c.vocab_size) * d);
  w.layer_flops = 2.0 * c.n_layers * layer_params;
  w.head_flops = 2.0 * c.vocab_size * d;
  w.head_bytes = weight * c.vocab_size * d;
  w.attention_flops = 4.0 * c.n_layers * c.n_heads * c.feature_dim * c.head_dim;
  w.state_bytes = 4.0 * static_cast<double>(c.StateFloatsPerSlot());
  return w;
}

std::vector<TokenId> RandomTokens(int n, std::mt19937_64& rng) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % 32000);
  return t;
}

struct DecodeRow {
  int batch;
  double step_s, bytes, flops;
};

DecodeRow MeasureDecode(Backend& backend, const Work& work, int batch, int steps,
                        std::mt19937_64& rng) {
  std::vector<SlotId> slots;
  for (int i = 0; i < batch; ++i) {
    slots.push_back(Must(backend.AllocateSlot()));
    Must(backend.Prefill(slots.back(), RandomTokens(16, rng), {}));
  }
  std::vector<float> logits(static_cast<size_t>(batch) * 32000);
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    std::vector<DecodeItem> items;
    for (SlotId slot : slots) items.push_back({slot, static_cast<TokenId>(rng() % 32000)});
    const auto t = Clock::now();
    Must(backend.Decode(items, absl::MakeSpan(logits)));
    if (s >= 2) times.push_back(Seconds(t));
  }
  for (SlotId slot : slots) backend.FreeSlot(slot);
  return {batch, Median(times), work.weight_bytes + 2.0 * batch * work.state_bytes,
          batch * (work.layer_flops + work.head_flops + work.attention_flops)};
}

struct PrefillRow {
  std::string name;
  int chunk, tokens;
  double seconds, bytes, flops;
};

PrefillRow MeasurePrefill(const Model& model, const Work& work, int chunk, int tokens,
                          int threads, std::mt19937_64& rng) {
  BackendOptions options;
  options.weight_precision = Precision();
  options.prefill_chunk_size = chunk;
  options.num_threads = threads;
  options.max_slots = 1;
  std::unique_ptr<Backend> backend = Must(CreateCpuBackend(model, options));
  const SlotId slot = Must(backend->AllocateSlot());
  const std::vector<TokenId> prompt = RandomTokens(tokens, rng);
  std::vector<float> logits(32000);
  const auto t = Clock::now();
  Must(backend->Prefill(slot, prompt, absl::MakeSpan(logits)));
  const double seconds = Seconds(t);
  // The layers' GEMMs run over passes of CpuBackend::kPrefillPassRows rows whatever the chunk
  // size (which sets the attention's chunk only): layer weights once per pass, the head once
  // (last logits only).
  const double passes = (tokens + CpuBackend::kPrefillPassRows - 1) / CpuBackend::kPrefillPassRows;
  return {absl::StrCat("chunked (", chunk, ")"),
          chunk,
          tokens,
          seconds,
          passes * (work.weight_bytes - work.head_bytes) + work.head_bytes,
          tokens * (work.layer_flops + work.attention_flops) + work.head_flops};
}

// The prompt fed as batch-1 decode steps, one token at a time (what a server without a
// parallel prefill does): every weight, the head's included, and the state once per token.
PrefillRow MeasureTokenByToken(const Model& model, const Work& work, int tokens, int threads,
                               std::mt19937_64& rng) {
  BackendOptions options;
  options.weight_precision = Precision();
  options.num_threads = threads;
  options.max_slots = 1;
  std::unique_ptr<Backend> backend = Must(CreateCpuBackend(model, options));
  const SlotId slot = Must(backend->AllocateSlot());
  const std::vector<TokenId> prompt = RandomTokens(tokens, rng);
  std::vector<float> logits(32000);
  const auto t = Clock::now();
  for (TokenId token : prompt) Must(backend->Decode({{slot, token}}, absl::MakeSpan(logits)));
  const double seconds = Seconds(t);
  return {"token by token (batch-1 decode steps, head included; the peer's step has no head)",
          1,
          tokens,
          seconds,
          tokens * (work.weight_bytes + 2.0 * work.state_bytes),
          tokens * (work.layer_flops + work.head_flops + work.attention_flops)};
}

struct LatencyRow {
  int64_t position;
  double ms;
};

// Sessions at positions 100, 1 000 and 10 000 (real states: one prefix prefilled and forked at
// each position) take decode steps in turn, so drift of a shared machine hits all three alike.
std::vector<LatencyRow> MeasureLatency(const Model& model, int threads, std::mt19937_64& rng) {
  const std::vector<int64_t> positions = {100, 1000, 10000};
  BackendOptions options;
  options.weight_precision = Precision();
  options.num_threads = threads;
  options.max_slots = 4;
  options.prefill_chunk_size = 256;
  std::unique_ptr<Backend> backend = Must(CreateCpuBackend(model, options));
  const SlotId prefix = Must(backend->AllocateSlot());
  std::vector<SlotId> probes;
  int64_t position = 0;
  for (int64_t target : positions) {
    Must(backend->Prefill(prefix, RandomTokens(static_cast<int>(target - position), rng), {}));
    position = target;
    probes.push_back(Must(backend->AllocateSlot()));
    Must(backend->CopySlot(prefix, probes.back()));
  }
  std::vector<std::vector<double>> times(positions.size());
  std::vector<float> logits(32000);
  for (int round = 0; round < 33; ++round) {
    for (size_t i = 0; i < probes.size(); ++i) {
      const DecodeItem item{probes[i], static_cast<TokenId>(rng() % 32000)};
      const auto t = Clock::now();
      Must(backend->Decode({&item, 1}, absl::MakeSpan(logits)));
      if (round >= 2) times[i].push_back(Seconds(t));
    }
  }
  std::vector<LatencyRow> out;
  for (size_t i = 0; i < positions.size(); ++i) {
    out.push_back({positions[i], 1e3 * Median(times[i])});
  }
  return out;
}

// ---- Decode step against context (issue 19) -------------------------------------------------

struct ContextPoint {
  int batch;
  int64_t context;
  double step_ms;
  int steps;
};

// Fewer timed steps for larger batches, whose steps take longer.
int ContextSteps(int batch) { return std::max(4, 64 / batch); }

// One session is prefilled to each context in turn (chunked prefill, real states); at each, it
// is copied into max(batches) slots, and every batch decodes from those copies: a median step of
// ContextSteps after two untimed ones. The copies are refreshed for each batch.
std::vector<ContextPoint> MeasureContexts(const Model& model, int threads,
                                          std::vector<int64_t> contexts,
                                          const std::vector<int>& batches, std::mt19937_64& rng) {
  std::sort(contexts.begin(), contexts.end());
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  BackendOptions options;
  options.weight_precision = Precision();
  options.num_threads = threads;
  options.max_batch_size = max_batch;
  options.max_slots = max_batch + 1;
  options.state_memory_budget_bytes =
      int64_t{max_batch + 1} * model.config.StateFloatsPerSlot() * 4;
  options.prefill_chunk_size = 256;
  std::unique_ptr<Backend> backend = Must(CreateCpuBackend(model, options));
  const SlotId prefix = Must(backend->AllocateSlot());
  std::vector<SlotId> slots;
  for (int i = 0; i < max_batch; ++i) slots.push_back(Must(backend->AllocateSlot()));
  std::vector<float> logits(static_cast<size_t>(max_batch) * model.config.vocab_size);
  std::vector<ContextPoint> out;
  int64_t position = 0;
  for (int64_t context : contexts) {
    std::fprintf(stderr, "context %lld: prefilling...\n", static_cast<long long>(context));
    Must(backend->Prefill(prefix, RandomTokens(static_cast<int>(context - position), rng), {}));
    position = context;
    for (int batch : batches) {
      std::vector<DecodeItem> items;
      for (int i = 0; i < batch; ++i) {
        Must(backend->CopySlot(prefix, slots[i]));
        items.push_back({slots[i], 0});
      }
      const int steps = ContextSteps(batch);
      std::vector<double> times;
      for (int s = 0; s < steps + 2; ++s) {
        for (DecodeItem& item : items) item.token = static_cast<TokenId>(rng() % 32000);
        const auto t = Clock::now();
        Must(backend->Decode(
            items, absl::MakeSpan(logits).subspan(0, static_cast<size_t>(batch) * 32000)));
        if (s >= 2) times.push_back(Seconds(t));
      }
      out.push_back({batch, context, 1e3 * Median(times), steps});
      std::fprintf(stderr, "context %lld, batch %d: %.2f ms\n", static_cast<long long>(context),
                   batch, out.back().step_ms);
    }
  }
  return out;
}

// Parses a comma-separated list of integers in [lo, hi]; exits on anything else.
std::vector<int64_t> ParseList(const std::string& flag, const std::string& text, int64_t lo,
                               int64_t hi) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      std::fprintf(stderr, "cpu_bench: --%s: '%s' is not an integer in [%lld, %lld]\n",
                   flag.c_str(), std::string(part).c_str(), static_cast<long long>(lo),
                   static_cast<long long>(hi));
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

int ContextSweep(int threads) {
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out.empty()) {
    std::fprintf(stderr, "cpu_bench: --contexts needs --json_out\n");
    return 2;
  }
  const std::vector<int64_t> contexts =
      ParseList("contexts", absl::GetFlag(FLAGS_contexts), 1, int64_t{1} << 20);
  std::vector<int> batches;
  for (int64_t b : ParseList("context_batches", absl::GetFlag(FLAGS_context_batches), 1, 1024)) {
    batches.push_back(static_cast<int>(b));
  }
  std::mt19937_64 rng(1);
  const ModelConfig config = Config125M();
  const Model model = MakeRandomModel(config, 1);
  const std::vector<ContextPoint> points = MeasureContexts(model, threads, contexts, batches, rng);
  nlohmann::json doc = {{"threads", threads},
                        {"parameters", model.weights.ParameterCount()},
                        {"weight_precision", std::string(WeightPrecisionName(Precision()))},
                        {"state_bytes_per_session", WorkOf(config).state_bytes},
                        {"points", nlohmann::json::array()}};
  for (const ContextPoint& p : points) {
    doc["points"].push_back(
        {{"batch", p.batch}, {"context", p.context}, {"step_ms", p.step_ms}, {"steps", p.steps}});
  }
  std::ofstream out(json_out);
  out << doc.dump(1) << "\n";
  if (!out) {
    std::fprintf(stderr, "cpu_bench: cannot write %s\n", json_out.c_str());
    return 1;
  }
  return 0;
}

// ---- Report --------------------------------------------------------------------------------

std::string Pct(double x) { return absl::StrFormat("%.0f%%", 100 * x); }

std::string Ratio(const nlohmann::json& peer, const std::string& key, double ours,
                  bool higher_is_better) {
  if (!peer.contains(key)) return "–";
  const double p = peer.at(key).get<double>();
  return absl::StrFormat("%.2f× (peer %.4g)", higher_is_better ? ours / p : p / ours, p);
}

int Main() {
  const int threads = cpu::ResolveNumThreads(absl::GetFlag(FLAGS_threads));
  Precision();  // an unknown value stops the run before anything is measured
  if (!absl::GetFlag(FLAGS_contexts).empty()) return ContextSweep(threads);
  nlohmann::json peer = nlohmann::json::object();
  if (const std::string path = absl::GetFlag(FLAGS_peer_json); !path.empty()) {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "cpu_bench: --peer_json %s cannot be read\n", path.c_str());
      return 1;
    }
    std::stringstream s;
    s << in.rdbuf();
    peer = nlohmann::json::parse(s.str(), nullptr, /*allow_exceptions=*/false);
    if (peer.is_discarded() || !peer.is_object()) {
      std::fprintf(stderr, "cpu_bench: --peer_json %s is not a JSON object\n", path.c_str());
      return 1;
    }
  }
  std::mt19937_64 rng(1);

  // Measure everything first; bandwidth again at the end, because on a shared host it drifts.
  std::fprintf(stderr, "measuring bandwidth and GEMM peak...\n");
  Floors floors = MeasureFloors(threads);
  const cpu::CpuIsa isa = cpu::ChosenCpuIsa();
  std::fprintf(stderr, "measuring compute peaks (%s)...\n",
               std::string(cpu::CpuIsaName(isa)).c_str());
  const bench::ComputePeaks peaks = bench::MeasureComputePeaks(threads, isa);
  std::fprintf(stderr, "building the 125M-shape model...\n");
  const ModelConfig config = Config125M();
  const Model model = MakeRandomModel(config, 1);
  const Work work = WorkOf(config);
  std::fprintf(stderr, "linear kernels...\n");
  const std::vector<LinearRow> linear = CompareLinear(model, threads);
  std::fprintf(stderr, "prefill-shape Linear in fp32, bf16, int8...\n");
  const std::vector<FormatLinearRow> prefill_linear = PrefillLinear(model, threads);

  std::fprintf(stderr, "decode...\n");
  BackendOptions options;
  options.weight_precision = Precision();
  options.num_threads = threads;
  options.max_batch_size = 128;
  options.max_slots = 130;
  options.state_memory_budget_bytes = int64_t{130} * config.StateFloatsPerSlot() * 4;
  std::unique_ptr<Backend> backend = Must(CreateCpuBackend(model, options));
  std::vector<DecodeRow> decode;
  for (auto [batch, steps] : {std::pair{1, 40}, {8, 24}, {32, 12}, {128, 6}}) {
    decode.push_back(MeasureDecode(*backend, work, batch, steps, rng));
  }
  backend.reset();
  std::fprintf(stderr, "prefill...\n");
  std::vector<PrefillRow> prefill;
  prefill.push_back(
      MeasurePrefill(model, work, absl::GetFlag(FLAGS_chunk_size), 2048, threads, rng));
  prefill.push_back(MeasureTokenByToken(model, work, 2048, threads, rng));
  std::fprintf(stderr, "latency...\n");
  const std::vector<LatencyRow> latency = MeasureLatency(model, threads, rng);
  const Bandwidth end_bw = MeasureBandwidth(threads);
  const double start_read = floors.read_gbs;
  // The floor uses the higher of the two readings: the harder target.
  floors.read_gbs = std::max(floors.read_gbs, end_bw.read_gbs);
  const double bw = floors.read_gbs * 1e9, peak = floors.peak_gflops() * 1e9;

  std::printf("## Machine (measured in this run, %d threads)\n\n", threads);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf("| read bandwidth, STREAM-like sum over 512 MiB (start / end of run) | %.1f / %.1f "
              "GB/s |\n",
              start_read, end_bw.read_gbs);
  std::printf("| triad bandwidth, STREAM convention (start / end) | %.1f / %.1f GB/s |\n",
              floors.triad_gbs, end_bw.triad_gbs);
  std::printf("| OpenBLAS sgemm 2048³ | %.1f GFLOP/s |\n", floors.blas_gflops);
  std::printf("| our packed Linear 2048³ | %.1f GFLOP/s |\n", floors.packed_gflops);
  std::printf("| floors use: read bandwidth %.1f GB/s (the higher), GEMM peak %.1f GFLOP/s (the "
              "higher) | |\n",
              floors.read_gbs, floors.peak_gflops());
  const std::string isa_name(cpu::CpuIsaName(peaks.isa));
  std::printf("| fp32 compute peak: vfmadd231ps on the %s path, register-only, every thread | "
              "%.1f GFLOP/s |\n",
              isa_name.c_str(), peaks.fp32_gflops);
  std::printf("| bf16 compute peak: our bf16 kernels widen to fp32 and run the fp32 FMAs (same "
              "results on every host), so it is the fp32 peak | %.1f GFLOP/s |\n",
              peaks.fp32_gflops);
  std::printf("| int8 compute peak: the int8 kernels' dot on the %s path (%s), register-only, "
              "every thread | %.1f GOP/s |\n",
              isa_name.c_str(),
              peaks.isa == cpu::CpuIsa::kAvx2 ? "vpmaddubsw + vpmaddwd + vpaddd" : "vpdpbusd",
              peaks.int8_gops);
  if (peaks.avx512_bf16_gflops) {
    std::printf("| for reference only: vdpbf16ps (AVX512_BF16), which our kernels do not use: it "
                "rounds activations to bf16, so results would differ from fp32 and between hosts "
                "| %.1f GFLOP/s |\n",
                *peaks.avx512_bf16_gflops);
  }
  std::printf("\n");
  std::printf("Model: 125M shape, %.1f M parameters, %s weights streamed per step %.0f MB, "
              "state %.2f MB per session.\n\n",
              model.weights.ParameterCount() / 1e6,
              std::string(WeightPrecisionName(Precision())).c_str(), work.weight_bytes / 1e6,
              work.state_bytes / 1e6);

  std::printf("## Linear layers: packed kernel vs OpenBLAS sgemm (all 73 weight matrices, "
              "cold in DRAM)\n\n");
  std::printf("| rows | packed | OpenBLAS | packed GFLOP/s | OpenBLAS GFLOP/s | speed-up |\n"
              "|---|---|---|---|---|---|\n");
  for (const LinearRow& r : linear) {
    std::printf("| %d | %.1f ms | %.1f ms | %.0f | %.0f | %.2f× |\n", r.rows, r.packed_ms,
                r.blas_ms, r.flops / r.packed_ms / 1e6, r.flops / r.blas_ms / 1e6,
                r.blas_ms / r.packed_ms);
  }

  std::printf("\n## Prefill GEMMs: packed Linear at %d rows (one prefill pass) over all 73 weight "
              "matrices, per weight format, against that format's compute peak\n\n",
              CpuBackend::kPrefillPassRows);
  std::printf("| weights | time | GFLOP/s (int8: GOP/s) | format's compute peak | of peak |\n"
              "|---|---|---|---|---|\n");
  for (const FormatLinearRow& r : prefill_linear) {
    const double rate = r.ops / r.ms / 1e6, its_peak = FormatPeak(peaks, r.precision);
    std::printf("| %s | %.1f ms | %.0f | %.0f | %s |\n",
                std::string(WeightPrecisionName(r.precision)).c_str(), r.ms, rate, its_peak,
                Pct(rate / its_peak).c_str());
  }

  std::printf("\n## Decode (median step; floor = max(bytes / read bandwidth, FLOPs / peak); "
              "bytes = weights + 2 × state per session)\n\n");
  std::printf("| batch | tokens/s | step | floor (bandwidth / compute) | of floor | "
              "of GEMM peak | vs PyTorch peer |\n|---|---|---|---|---|---|---|\n");
  for (const DecodeRow& r : decode) {
    const double floor_bw = r.bytes / bw, floor_compute = r.flops / peak;
    const double floor = std::max(floor_bw, floor_compute);
    const double tps = r.batch / r.step_s;
    std::printf("| %d | %.1f | %.2f ms | %.2f ms (%.2f / %.2f) | %s | %s | %s |\n", r.batch, tps,
                1e3 * r.step_s, 1e3 * floor, 1e3 * floor_bw, 1e3 * floor_compute,
                Pct(floor / r.step_s).c_str(), Pct(r.flops / r.step_s / peak).c_str(),
                Ratio(peer, absl::StrCat("decode_tps_", r.batch), tps, true).c_str());
  }

  std::printf("\n## Prefill of 2048 tokens (last logits only)\n\n");
  const double format_peak = FormatPeak(peaks, Precision()) * 1e9;
  std::printf("| mode | tokens/s | time | floor | of floor | of GEMM peak | of %s compute peak | "
              "vs PyTorch peer |\n|---|---|---|---|---|---|---|---|\n",
              std::string(WeightPrecisionName(Precision())).c_str());
  for (const PrefillRow& r : prefill) {
    const double floor = std::max(r.bytes / bw, r.flops / peak);
    const double tps = r.tokens / r.seconds;
    std::printf("| %s | %.1f | %.2f s | %.2f s | %s | %s | %s | %s |\n", r.name.c_str(), tps,
                r.seconds, floor, Pct(floor / r.seconds).c_str(),
                Pct(r.flops / r.seconds / peak).c_str(),
                Pct(r.flops / r.seconds / format_peak).c_str(),
                Ratio(peer, r.chunk == 1 ? "prefill_token_by_token_tps" : "prefill_chunked_tps",
                      tps, true)
                    .c_str());
  }

  std::printf("\n## Decode latency by position (batch 1, median of 31 steps, positions taken in "
              "turn)\n\n");
  std::printf("| position | latency | vs position 100 | vs PyTorch peer |\n|---|---|---|---|\n");
  for (const LatencyRow& r : latency) {
    std::printf("| %lld | %.2f ms | %+.1f%% | %s |\n", static_cast<long long>(r.position), r.ms,
                100 * (r.ms / latency[0].ms - 1),
                Ratio(peer, absl::StrCat("latency_ms_", r.position), r.ms, false).c_str());
  }
  if (peer.contains("torch")) {
    std::printf("\nPeer: %s\n", peer.at("torch").get<std::string>().c_str());
  }

  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out.empty()) return 0;
  // The main mode's JSON: the figures of the markdown above, unrounded. Times in ms (prefill in
  // s), rates in GB/s, GFLOP/s (int8: GOP/s) and tokens/s (summed over the batch); "of_*" are
  // fractions (1 = 100%). compute_peak.bf16_gflops is the fp32 peak (compute_peak.h), and
  // avx512_bf16_gflops is null where the host lacks AVX512_BF16.
  nlohmann::json doc = {
      {"mode", "main"},
      {"threads", threads},
      {"weight_precision", std::string(WeightPrecisionName(Precision()))},
      {"parameters", model.weights.ParameterCount()},
      {"weight_bytes_per_step", work.weight_bytes},
      {"state_bytes_per_session", work.state_bytes},
      {"machine",
       {{"read_gbs_start", start_read},
        {"read_gbs_end", end_bw.read_gbs},
        {"read_gbs", floors.read_gbs},
        {"triad_gbs_start", floors.triad_gbs},
        {"triad_gbs_end", end_bw.triad_gbs},
        {"sgemm_gflops", floors.blas_gflops},
        {"packed_gflops", floors.packed_gflops},
        {"gemm_peak_gflops", floors.peak_gflops()}}},
      {"compute_peak",
       {{"isa", isa_name},
        {"fp32_gflops", peaks.fp32_gflops},
        {"bf16_gflops", peaks.fp32_gflops},
        {"int8_gops", peaks.int8_gops},
        {"avx512_bf16_gflops", peaks.avx512_bf16_gflops ? nlohmann::json(*peaks.avx512_bf16_gflops)
                                                        : nlohmann::json(nullptr)}}},
      {"linear", nlohmann::json::array()},
      {"prefill_linear", nlohmann::json::array()},
      {"decode", nlohmann::json::array()},
      {"prefill", nlohmann::json::array()},
      {"latency", nlohmann::json::array()}};
  for (const LinearRow& r : linear) {
    doc["linear"].push_back({{"rows", r.rows},
                             {"packed_ms", r.packed_ms},
                             {"sgemm_ms", r.blas_ms},
                             {"packed_gflops", r.flops / r.packed_ms / 1e6},
                             {"sgemm_gflops", r.flops / r.blas_ms / 1e6}});
  }
  for (const FormatLinearRow& r : prefill_linear) {
    const double rate = r.ops / r.ms / 1e6, its_peak = FormatPeak(peaks, r.precision);
    doc["prefill_linear"].push_back({{"weights", std::string(WeightPrecisionName(r.precision))},
                                     {"rows", r.rows},
                                     {"ms", r.ms},
                                     {"gops", rate},
                                     {"peak_gops", its_peak},
                                     {"of_peak", rate / its_peak}});
  }
  for (const DecodeRow& r : decode) {
    const double floor_bw = r.bytes / bw, floor_compute = r.flops / peak;
    doc["decode"].push_back({{"batch", r.batch},
                             {"tokens_per_s", r.batch / r.step_s},
                             {"step_ms", 1e3 * r.step_s},
                             {"floor_bandwidth_ms", 1e3 * floor_bw},
                             {"floor_compute_ms", 1e3 * floor_compute},
                             {"of_floor", std::max(floor_bw, floor_compute) / r.step_s},
                             {"of_bandwidth_floor", floor_bw / r.step_s},
                             {"of_gemm_peak", r.flops / r.step_s / peak}});
  }
  for (const PrefillRow& r : prefill) {
    doc["prefill"].push_back(
        {{"mode", r.chunk == 1 ? "token_by_token" : "chunked"},
         {"chunk", r.chunk},
         {"tokens", r.tokens},
         {"tokens_per_s", r.tokens / r.seconds},
         {"seconds", r.seconds},
         {"floor_s", std::max(r.bytes / bw, r.flops / peak)},
         {"of_floor", std::max(r.bytes / bw, r.flops / peak) / r.seconds},
         {"of_gemm_peak", r.flops / r.seconds / peak},
         {"of_format_peak", r.flops / r.seconds / format_peak}});
  }
  for (const LatencyRow& r : latency) {
    doc["latency"].push_back({{"position", r.position}, {"ms", r.ms}});
  }
  std::ofstream out(json_out);
  out << doc.dump(1) << "\n";
  if (!out) {
    std::fprintf(stderr, "cpu_bench: cannot write %s\n", json_out.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Benchmarks the CPU engine on the 125M shape against measured floors and the PyTorch "
      "peer; prints markdown.");
  absl::ParseCommandLine(argc, argv);
  // stdout is the report.
  spdlog::set_default_logger(spdlog::stderr_color_mt("cpu_bench"));
  return linserve::Main();
}
