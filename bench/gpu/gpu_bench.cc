// gpu_bench: the CUDA backend on the 125M shape (d_model 768, 12 layers, 12 heads × 64, d_ff
// 3072, vocab 50257, tied head, random weights in bf16, fp32 state) or, with --shape=based, the
// Based layer kinds at the same width (ConfigBased125M), or with --shape=gated_delta_net, gla or
// retnet fla's Gated DeltaNet, GLA or RetNet block there (ConfigGatedDeltaNet125M, ConfigGla125M,
// ConfigRetNet125M), or with --shape=mamba2 fla's Mamba-2 block (ConfigMamba2_125M), each figure
// against its floor
// (docs/architecture.md §7), measured in this same run:
//   HBM floor  = bytes that must move (every weight once per step + every decoding session's
//                state read and written) / the device-to-device copy bandwidth;
//   FLOP floor = matrix FLOPs / a large bf16 cuBLASLt GEMM's rate (prefill only).
// Sections: floors; decode tokens/s at each batch size (greedy DecodeAndSample, so only token
// ids cross PCIe), plus batch 1 without CUDA graphs, batch 64 with top-k/top-p sampling, and
// batches 1 and 64 with every kernel launched only after the one before (dependent_launch.h);
// prefill tokens/s; per-token latency at far positions; the per-kernel floors of a decode step
// (kernel_account.h) at each batch size. bench/gpu/peers.py measures the peers and
// bench/gpu/report.py merges both JSON files into bench/results/gpu.md.
// With --profile_batch=B it only runs --profile_steps greedy decode steps at batch B between
// cudaProfilerStart and cudaProfilerStop (for nsys --capture-range=cudaProfilerApi) and writes
// that batch's kernel account to --json_out; bench/gpu/kernel_report.py sets the profile's
// per-kernel times beside it (bench/run_gpu.sh does both). --profile_prefill=N does the same for
// --profile_steps prefills of one N-token prompt (PrefillKernelAccount).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_support.h"
#include "bench/gpu/bench_shapes.h"
#include "bench/gpu/kernel_account.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/small_batch_linear.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/backend/sampler.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, batches, "1,8,64,256,1024", "Decode batch sizes, comma-separated.");
ABSL_FLAG(std::string, prefill_lengths, "2048,32768", "Prefill prompt lengths, comma-separated.");
ABSL_FLAG(std::string, positions, "1024,16384,262144",
          "Positions of the per-token latency figures, comma-separated.");
ABSL_FLAG(std::string, precision, "bf16", "Weight precision: bf16, fp16 or fp32.");
ABSL_FLAG(double, min_seconds, 1.0, "Each decode figure runs at least this long, (0, 60].");
ABSL_FLAG(std::string, json_out, "", "Also write every figure as JSON to this file.");
ABSL_FLAG(std::string, shape, "125m",
          "Model shape: 125m (linear attention), based (short_conv, taylor_linear_attention, "
          "sliding_window_attention, rms_norm, gated_mlp at d_model 768), gated_delta_net, gla, "
          "retnet or mamba2 (fla's Gated DeltaNet, GLA, RetNet or Mamba-2 block at d_model "
          "768).");
ABSL_FLAG(int, profile_batch, 0,
          "If > 0: only run --profile_steps decode steps at this batch inside "
          "cudaProfilerStart/Stop and write the batch's kernel account to --json_out.");
ABSL_FLAG(int, profile_prefill, 0,
          "If > 0: only run --profile_steps prefills of a prompt of this many tokens inside "
          "cudaProfilerStart/Stop and write their kernel account to --json_out.");
ABSL_FLAG(int, profile_steps, 50,
          "Decode steps of a --profile_batch run, or prefills of a --profile_prefill run, "
          "[1, 100000].");

namespace linserve {
namespace {

static_assert(kFusedEpilogueMaxRows == cuda::kSmallBatchLinearMaxRows &&
                  kFusedEpilogueKMultiple == cuda::kSmallBatchLinearKMultiple,
              "the kernel account's fused projections are the small-batch linear layer's");

using bench::Clock;
using bench::Median;
using bench::Seconds;
using Json = nlohmann::json;

void Die(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

std::vector<int> ParseList(const std::string& text, const char* flag) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      std::fprintf(stderr, "gpu_bench: --%s: \"%s\" is not a positive integer\n", flag,
                   std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  if (out.empty()) {
    std::fprintf(stderr, "gpu_bench: --%s is empty\n", flag);
    std::exit(2);
  }
  return out;
}

// Matrix FLOPs of one token through the layers (the LM head is added where it runs): the GEMMs
// and mixers of the kernel account at batch 1.
double LayerFlopsPerToken(const ModelConfig& c) {
  absl::StatusOr<std::vector<KernelCost>> account = DecodeKernelAccount(c, 1, 2);
  Die(account.status(), "kernel account");
  double flops = 0;
  for (const KernelCost& k : *account) {
    if (k.name != "lm head") flops += static_cast<double>(k.flops);
  }
  return flops;
}

// The device-to-device copy rate, counting bytes read plus bytes written (KINDS.md's measure).
double MeasureBandwidth() {
  const size_t bytes = size_t{2} << 30;
  absl::StatusOr<cuda::DeviceBuffer> a = cuda::DeviceBuffer::Allocate(bytes, "bandwidth source");
  absl::StatusOr<cuda::DeviceBuffer> b = cuda::DeviceBuffer::Allocate(bytes, "bandwidth target");
  Die(a.status(), "bandwidth buffers");
  Die(b.status(), "bandwidth buffers");
  Die(cuda::CudaErrorToStatus(cudaMemset(a->data(), 1, bytes), "cudaMemset", __FILE__, __LINE__),
      "memset");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> rates;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(start);
    cudaMemcpyAsync(b->data(), a->data(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    Die(cuda::CudaErrorToStatus(cudaEventSynchronize(stop), "copy", __FILE__, __LINE__), "copy");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= 2) rates.push_back(2.0 * bytes / (ms * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(rates);
}

// A large bf16 GEMM through the same cuBLASLt path the backend uses: the arithmetic ceiling.
double MeasureGemmFlops() {
  const int64_t n = 8192;
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(size_t{32} << 20);
  Die(gemm.status(), "gemm");
  absl::StatusOr<cuda::DeviceBuffer> x = cuda::DeviceBuffer::Allocate(n * n * 2, "gemm x");
  absl::StatusOr<cuda::DeviceBuffer> w = cuda::DeviceBuffer::Allocate(n * n * 2, "gemm w");
  absl::StatusOr<cuda::DeviceBuffer> y = cuda::DeviceBuffer::Allocate(n * n * 4, "gemm y");
  Die(x.status(), "gemm buffers");
  Die(w.status(), "gemm buffers");
  Die(y.status(), "gemm buffers");
  // Every bf16 element becomes 0x3C3C or 0x3B3B (about 0.01): finite and non-zero, since a
  // product of zeros runs faster than real data.
  cudaMemset(x->data(), 0x3C, n * n * 2);
  cudaMemset(w->data(), 0x3B, n * n * 2);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> rates;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(start);
    Die((*gemm)->Linear(nullptr, cuda::DType::kBf16, x->data(), w->data(), y->as<float>(), n, n, n),
        "gemm");
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= 2) rates.push_back(2.0 * n * n * n / (ms * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(rates);
}

struct Floors {
  double bandwidth;  // bytes/s
  double flops;      // FLOP/s
  int64_t weight_bytes;
  int64_t slot_bytes;
};

// Decode steps at one batch size: greedy (or `params`) DecodeAndSample on `batch` sessions
// forked from one prefilled session, for at least --min_seconds.
Json MeasureDecode(CudaBackend& backend, const Floors& floors, int batch,
                   const SamplingParams& params, const std::string& label) {
  std::vector<SlotId> slots;
  for (int i = 0; i < batch; ++i) {
    absl::StatusOr<SlotId> s = backend.AllocateSlot();
    Die(s.status(), "AllocateSlot");
    slots.push_back(*s);
  }
  const std::vector<TokenId> prompt(32, 65);
  Die(backend.Prefill(slots[0], prompt, {}), "Prefill");
  for (int i = 0; i < batch; ++i) {
    if (i > 0) Die(backend.CopySlot(slots[0], slots[i]), "CopySlot");
    SamplingParams p = params;
    p.seed = static_cast<uint64_t>(i);
    // Slot 0's counts reach the others through CopySlot.
    Die(backend.StartSampling(slots[i], p, 0,
                              i == 0 ? absl::MakeConstSpan(prompt) : absl::Span<const TokenId>()),
        "StartSampling");
  }
  std::vector<DecodeItem> items(batch);
  std::vector<TokenId> tokens(batch, 66);
  auto step = [&]() {
    for (int i = 0; i < batch; ++i) items[i] = {slots[i], tokens[i]};
    Die(backend.DecodeAndSample(items, {.tokens = absl::MakeSpan(tokens)}), "DecodeAndSample");
  };
  for (int i = 0; i < 3; ++i) step();  // the first one captures the bucket's graph
  std::vector<double> times;
  const auto begin = Clock::now();
  while (times.size() < 10 || Seconds(begin) < absl::GetFlag(FLAGS_min_seconds)) {
    const auto t = Clock::now();
    step();
    times.push_back(Seconds(t));
  }
  for (SlotId s : slots) backend.FreeSlot(s);

  double total = 0;
  for (double t : times) total += t;
  const double mean = total / static_cast<double>(times.size());
  const double bytes = static_cast<double>(floors.weight_bytes) +
                       2.0 * static_cast<double>(batch) * static_cast<double>(floors.slot_bytes);
  const double floor_seconds = bytes / floors.bandwidth;
  Json j;
  j["label"] = label;
  j["batch"] = batch;
  j["steps"] = times.size();
  j["step_ms_mean"] = mean * 1e3;
  j["step_ms_median"] = Median(times) * 1e3;
  j["tokens_per_s"] = batch / mean;
  j["bytes_per_step"] = bytes;
  j["floor_ms"] = floor_seconds * 1e3;
  j["fraction_of_floor"] = floor_seconds / mean;  // 1.0 = at the HBM floor
  std::printf("| %s | %d | %.3f | %.3f | %.0f | %.3f | %.0f%% |\n", label.c_str(), batch,
              Median(times) * 1e3, mean * 1e3, batch / mean, floor_seconds * 1e3,
              100.0 * floor_seconds / mean);
  std::fflush(stdout);
  return j;
}

Json MeasurePrefill(CudaBackend& backend, const Floors& floors, const ModelConfig& config,
                    int length) {
  absl::StatusOr<SlotId> slot = backend.AllocateSlot();
  Die(slot.status(), "AllocateSlot");
  std::vector<TokenId> tokens(static_cast<size_t>(length));
  for (int i = 0; i < length; ++i) tokens[i] = static_cast<TokenId>((i * 7919) % config.vocab_size);
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  std::vector<double> times;
  for (int i = 0; i < 4; ++i) {
    Die(backend.ResetSlot(*slot), "ResetSlot");
    const auto t = Clock::now();
    Die(backend.Prefill(*slot, tokens, absl::MakeSpan(logits)), "Prefill");
    if (i > 0) times.push_back(Seconds(t));  // the first run warms the GEMM plans
  }
  backend.FreeSlot(*slot);
  const double seconds = Median(times);
  const double flops = LayerFlopsPerToken(config) * length +
                       2.0 * config.d_model * static_cast<double>(config.vocab_size);
  const double segments = std::ceil(length / 2048.0);
  const double bytes = static_cast<double>(floors.weight_bytes) * segments +
                       2.0 * static_cast<double>(floors.slot_bytes) * segments;
  Json j;
  j["tokens"] = length;
  j["seconds"] = seconds;
  j["tokens_per_s"] = length / seconds;
  j["flop_floor_s"] = flops / floors.flops;
  j["hbm_floor_s"] = bytes / floors.bandwidth;
  j["fraction_of_flop_floor"] = flops / floors.flops / seconds;
  j["fraction_of_hbm_floor"] = bytes / floors.bandwidth / seconds;
  std::printf("| %d | %.1f | %.0f | %.1f | %.0f%% | %.2f | %.1f%% |\n", length, seconds * 1e3,
              length / seconds, flops / floors.flops * 1e3, 100.0 * flops / floors.flops / seconds,
              bytes / floors.bandwidth * 1e3, 100.0 * bytes / floors.bandwidth / seconds);
  std::fflush(stdout);
  return j;
}

Json MeasureLatencyAt(CudaBackend& backend, const Floors& floors, int64_t position) {
  absl::StatusOr<SlotId> slot = backend.AllocateSlot();
  Die(slot.status(), "AllocateSlot");
  const std::vector<TokenId> prompt(16, 70);
  Die(backend.Prefill(*slot, prompt, {}), "Prefill");
  StateBlob blob;
  Die(backend.ReadSlot(*slot, blob), "ReadSlot");
  blob.position = position;  // a state that has seen `position` tokens (the cost is flat)
  Die(backend.WriteSlot(*slot, blob), "WriteSlot");
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Die(backend.StartSampling(*slot, greedy, 0, prompt), "StartSampling");
  TokenId token = 71;
  std::vector<double> times;
  for (int i = 0; i < 203; ++i) {
    const DecodeItem item{*slot, token};
    const auto t = Clock::now();
    Die(backend.DecodeAndSample({&item, 1}, {.tokens = {&token, 1}}), "DecodeAndSample");
    if (i >= 3) times.push_back(Seconds(t));
  }
  backend.FreeSlot(*slot);
  const double floor_seconds =
      (static_cast<double>(floors.weight_bytes) + 2.0 * floors.slot_bytes) / floors.bandwidth;
  const double median = Median(times);
  Json j;
  j["position"] = position;
  j["latency_ms_median"] = median * 1e3;
  j["floor_ms"] = floor_seconds * 1e3;
  j["fraction_of_floor"] = floor_seconds / median;
  std::printf("| %lld | %.3f | %.3f | %.0f%% |\n", static_cast<long long>(position), median * 1e3,
              floor_seconds * 1e3, 100.0 * floor_seconds / median);
  std::fflush(stdout);
  return j;
}

Json AccountJson(const std::vector<KernelCost>& account, const Floors& floors) {
  Json rows = Json::array();
  for (const KernelCost& k : account) {
    const double floor_s = std::max(static_cast<double>(k.bytes.total()) / floors.bandwidth,
                                    static_cast<double>(k.flops) / floors.flops);
    rows.push_back({{"name", k.name},
                    {"cuda_kernels", k.cuda_kernels},
                    {"launches", k.launches},
                    {"weight_bytes", k.bytes.weights},
                    {"state_bytes", k.bytes.state},
                    {"activation_bytes", k.bytes.activations},
                    {"logit_bytes", k.bytes.logits},
                    {"flops", k.flops},
                    {"floor_us", floor_s * 1e6}});
  }
  return rows;
}

// The decode step's kernel account at `batch` (kernel_account.h): a markdown table, each kernel's
// floor the larger of its bytes at the measured copy rate and its FLOPs at the measured GEMM rate.
Json PrintKernelAccount(const ModelConfig& config, int64_t element, const Floors& floors,
                        int batch) {
  absl::StatusOr<std::vector<KernelCost>> account = DecodeKernelAccount(config, batch, element);
  Die(account.status(), "kernel account");
  std::printf("\n### Batch %d\n\n", batch);
  std::printf("| kernel | launches | weights MB | state MB | activations MB | logits MB | GFLOP | "
              "floor µs |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<KernelCost> rows = *account;
  rows.push_back(AccountTotal(*account));
  for (const KernelCost& k : rows) {
    const double floor_s = std::max(static_cast<double>(k.bytes.total()) / floors.bandwidth,
                                    static_cast<double>(k.flops) / floors.flops);
    std::printf("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n", k.name.c_str(),
                k.launches, k.bytes.weights / 1e6, k.bytes.state / 1e6, k.bytes.activations / 1e6,
                k.bytes.logits / 1e6, k.flops / 1e9, floor_s * 1e6);
  }
  std::fflush(stdout);
  Json j;
  j["batch"] = batch;
  j["kernels"] = AccountJson(*account, floors);
  return j;
}

// --profile_batch: `steps` greedy decode steps at `batch` between cudaProfilerStart and
// cudaProfilerStop, after a warm-up that captures the bucket's graph.
void ProfileDecode(CudaBackend& backend, int batch, int steps) {
  std::vector<SlotId> slots;
  const std::vector<TokenId> prompt(32, 65);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int i = 0; i < batch; ++i) {
    absl::StatusOr<SlotId> s = backend.AllocateSlot();
    Die(s.status(), "AllocateSlot");
    slots.push_back(*s);
    if (i == 0) {
      Die(backend.Prefill(*s, prompt, {}), "Prefill");
    } else {
      Die(backend.CopySlot(slots[0], *s), "CopySlot");
    }
    Die(backend.StartSampling(*s, greedy, 0, {}), "StartSampling");
  }
  std::vector<DecodeItem> items(batch);
  std::vector<TokenId> tokens(batch, 66);
  auto step = [&]() {
    for (int i = 0; i < batch; ++i) items[i] = {slots[i], tokens[i]};
    Die(backend.DecodeAndSample(items, {.tokens = absl::MakeSpan(tokens)}), "DecodeAndSample");
  };
  for (int i = 0; i < 3; ++i) step();
  Die(cuda::CudaErrorToStatus(cudaDeviceSynchronize(), "sync", __FILE__, __LINE__), "sync");
  Die(cuda::CudaErrorToStatus(cudaProfilerStart(), "cudaProfilerStart", __FILE__, __LINE__),
      "cudaProfilerStart");
  for (int i = 0; i < steps; ++i) step();
  Die(cuda::CudaErrorToStatus(cudaDeviceSynchronize(), "sync", __FILE__, __LINE__), "sync");
  Die(cuda::CudaErrorToStatus(cudaProfilerStop(), "cudaProfilerStop", __FILE__, __LINE__),
      "cudaProfilerStop");
  for (SlotId s : slots) backend.FreeSlot(s);
}

// --profile_prefill: `prefills` prefills of one `tokens`-token prompt (last-token logits) between
// cudaProfilerStart and cudaProfilerStop, after one that warms the GEMM plans.
void ProfilePrefill(CudaBackend& backend, const ModelConfig& config, int tokens, int prefills) {
  absl::StatusOr<SlotId> slot = backend.AllocateSlot();
  Die(slot.status(), "AllocateSlot");
  std::vector<TokenId> prompt(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) prompt[i] = static_cast<TokenId>((i * 7919) % config.vocab_size);
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  auto prefill = [&]() {
    Die(backend.ResetSlot(*slot), "ResetSlot");
    Die(backend.Prefill(*slot, prompt, absl::MakeSpan(logits)), "Prefill");
  };
  prefill();
  Die(cuda::CudaErrorToStatus(cudaProfilerStart(), "cudaProfilerStart", __FILE__, __LINE__),
      "cudaProfilerStart");
  for (int i = 0; i < prefills; ++i) prefill();
  Die(cuda::CudaErrorToStatus(cudaDeviceSynchronize(), "sync", __FILE__, __LINE__), "sync");
  Die(cuda::CudaErrorToStatus(cudaProfilerStop(), "cudaProfilerStop", __FILE__, __LINE__),
      "cudaProfilerStop");
  backend.FreeSlot(*slot);
}

bool WriteJson(const Json& out) {
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out.empty()) return true;
  std::ofstream f(json_out);
  f << out.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "gpu_bench: cannot write --json_out %s\n", json_out.c_str());
    return false;
  }
  return true;
}

int Main() {
  const std::vector<int> batches = ParseList(absl::GetFlag(FLAGS_batches), "batches");
  const std::vector<int> lengths =
      ParseList(absl::GetFlag(FLAGS_prefill_lengths), "prefill_lengths");
  const std::vector<int> positions = ParseList(absl::GetFlag(FLAGS_positions), "positions");
  const double min_seconds = absl::GetFlag(FLAGS_min_seconds);
  if (!(min_seconds > 0 && min_seconds <= 60)) {
    std::fprintf(stderr, "gpu_bench: --min_seconds = %g is outside (0, 60]\n", min_seconds);
    return 2;
  }
  BackendOptions options;
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision == "bf16") {
    options.weight_precision = WeightPrecision::kBf16;
  } else if (precision == "fp16") {
    options.weight_precision = WeightPrecision::kFp16;
  } else if (precision == "fp32") {
    options.weight_precision = WeightPrecision::kFp32;
  } else {
    std::fprintf(stderr, "gpu_bench: --precision = \"%s\" is not one of bf16, fp16, fp32\n",
                 precision.c_str());
    return 2;
  }
  const std::string shape = absl::GetFlag(FLAGS_shape);
  if (shape != "125m" && shape != "based" && shape != "gated_delta_net" && shape != "gla" &&
      shape != "retnet" && shape != "mamba2") {
    std::fprintf(stderr,
                 "gpu_bench: --shape = \"%s\" is not one of 125m, based, gated_delta_net, gla, "
                 "retnet, mamba2\n",
                 shape.c_str());
    return 2;
  }
  const int profile_batch = absl::GetFlag(FLAGS_profile_batch);
  const int profile_prefill = absl::GetFlag(FLAGS_profile_prefill);
  const int profile_steps = absl::GetFlag(FLAGS_profile_steps);
  if (profile_batch < 0 || profile_prefill < 0 || (profile_batch > 0 && profile_prefill > 0) ||
      profile_steps < 1 || profile_steps > 100000) {
    std::fprintf(stderr,
                 "gpu_bench: --profile_batch = %d and --profile_prefill = %d must be >= 0, not "
                 "both > 0, and --profile_steps = %d in [1, 100000]\n",
                 profile_batch, profile_prefill, profile_steps);
    return 2;
  }
  const int max_batch = profile_batch > 0     ? profile_batch
                        : profile_prefill > 0 ? 1
                                              : *std::max_element(batches.begin(), batches.end());
  absl::StatusOr<ModelConfig> parsed = shape == "based"             ? ConfigBased125M()
                                       : shape == "gated_delta_net" ? ConfigGatedDeltaNet125M()
                                       : shape == "gla"             ? ConfigGla125M()
                                       : shape == "retnet"          ? ConfigRetNet125M()
                                       : shape == "mamba2"          ? ConfigMamba2_125M()
                                                                    : Config125M();
  Die(parsed.status(), "the model shape");
  const ModelConfig config = *std::move(parsed);
  const int64_t element = options.weight_precision == WeightPrecision::kFp32 ? 4 : 2;
  const int64_t slot_bytes = config.StateFloatsPerSlot() * 4;
  options.max_batch_size = max_batch;
  options.max_slots = max_batch + 1;
  options.state_memory_budget_bytes = slot_bytes * options.max_slots;

  std::fprintf(stderr, "gpu_bench: building a random %s-shape model...\n", shape.c_str());
  const Model model = MakeRandomModel(config, 1);
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CreateCudaBackend(model, options);
  Die(backend.status(), "CreateCudaBackend");
  Floors floors;
  floors.bandwidth = MeasureBandwidth();
  floors.flops = MeasureGemmFlops();
  floors.weight_bytes = (*backend)->memory_use().weights_bytes;
  floors.slot_bytes = slot_bytes;

  Json out;
  out["shape"] = shape;
  if (profile_prefill > 0 || profile_batch > 0) {
    // A profiled run: its kernel account, for kernel_report.py beside the profiler's times.
    absl::StatusOr<std::vector<KernelCost>> account;
    if (profile_prefill > 0) {
      ProfilePrefill(**backend, config, profile_prefill, profile_steps);
      account = PrefillKernelAccount(config, profile_prefill, CudaPrefillSegment(options),
                                     options.prefill_chunk_size, element);
      out["tokens"] = profile_prefill;
    } else {
      ProfileDecode(**backend, profile_batch, profile_steps);
      account = DecodeKernelAccount(config, profile_batch, element);
      out["batch"] = profile_batch;
    }
    Die(account.status(), "kernel account");
    out["device"] = (*backend)->device_description();
    out["precision"] = precision;
    out["steps"] = profile_steps;
    out["bandwidth_bytes_per_s"] = floors.bandwidth;
    out["gemm_flops_per_s"] = floors.flops;
    out["kernels"] = AccountJson(*account, floors);
    return WriteJson(out) ? 0 : 1;
  }
  out["device"] = (*backend)->device_description();
  out["precision"] = precision;
  out["parameters"] = model.weights.ParameterCount();
  out["bandwidth_bytes_per_s"] = floors.bandwidth;
  out["gemm_flops_per_s"] = floors.flops;
  out["weight_bytes"] = floors.weight_bytes;
  out["slot_bytes"] = floors.slot_bytes;

  std::printf("## Floors\n\n%s shape: %s, %s weights (%s), fp32 state (%s per session).\n\n",
              shape.c_str(), out["device"].get<std::string>().c_str(), precision.c_str(),
              cuda::FormatBytes(floors.weight_bytes).c_str(),
              cuda::FormatBytes(slot_bytes).c_str());
  std::printf("| measured | value |\n|---|---|\n");
  std::printf("| device-to-device copy (read + write) | %.0f GB/s |\n", floors.bandwidth / 1e9);
  std::printf("| bf16 GEMM 8192³ (cuBLASLt) | %.0f TFLOP/s |\n\n", floors.flops / 1e12);

  std::printf(
      "## Decode (greedy DecodeAndSample; HBM floor = weights + 2 × state per session)\n\n");
  std::printf(
      "| run | batch | step ms (median) | step ms (mean) | tokens/s | floor ms | of floor |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Json decode = Json::array();
  for (int b : batches) decode.push_back(MeasureDecode(**backend, floors, b, greedy, "graphs"));
  out["decode"] = decode;

  SamplingParams nucleus;
  nucleus.temperature = 0.8f;
  nucleus.top_k = 50;
  nucleus.top_p = 0.9f;
  nucleus.repetition_penalty = 1.1f;
  const int sampling_batch = std::min(64, max_batch);
  out["decode_sampling"] =
      MeasureDecode(**backend, floors, sampling_batch, nucleus, "top-k 50 + top-p 0.9");
  {
    CudaBackendOptions eager;
    eager.use_cuda_graphs = false;
    BackendOptions small = options;
    small.max_slots = 2;
    small.state_memory_budget_bytes = 2 * slot_bytes;
    small.max_batch_size = 1;
    absl::StatusOr<std::unique_ptr<CudaBackend>> no_graphs = CreateCudaBackend(model, small, eager);
    Die(no_graphs.status(), "CreateCudaBackend (no graphs)");
    out["decode_no_graphs"] = MeasureDecode(**no_graphs, floors, 1, greedy, "no graphs");
  }
  {
    // Every kernel started only once the one before has finished (kernels/cuda/
    // dependent_launch.h): what launching them as programmatic dependents gains, same run.
    cuda::SetDependentLaunch(false);
    BackendOptions serialized_options = options;
    serialized_options.max_batch_size = sampling_batch;
    serialized_options.max_slots = sampling_batch + 1;
    serialized_options.state_memory_budget_bytes = (sampling_batch + 1) * slot_bytes;
    absl::StatusOr<std::unique_ptr<CudaBackend>> serialized =
        CreateCudaBackend(model, serialized_options);
    Die(serialized.status(), "CreateCudaBackend (serialized launches)");
    Json rows = Json::array();
    rows.push_back(MeasureDecode(**serialized, floors, 1, greedy, "serialized launches"));
    if (sampling_batch > 1) {
      rows.push_back(
          MeasureDecode(**serialized, floors, sampling_batch, greedy, "serialized launches"));
    }
    out["decode_serialized"] = rows;
    cuda::SetDependentLaunch(true);
  }

  std::printf("\n## Prefill (one session, last-token logits)\n\n");
  std::printf(
      "| tokens | ms | tokens/s | FLOP floor ms | of FLOP floor | HBM floor ms | of HBM floor |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  Json prefill = Json::array();
  for (int n : lengths) prefill.push_back(MeasurePrefill(**backend, floors, config, n));
  out["prefill"] = prefill;

  std::printf("\n## Per-token latency by position (batch 1)\n\n");
  std::printf("| position | ms (median) | floor ms | of floor |\n|---|---|---|---|\n");
  Json latency = Json::array();
  for (int p : positions) latency.push_back(MeasureLatencyAt(**backend, floors, p));
  out["latency"] = latency;

  std::printf("\n## Kernel floors of a decode step (bench/gpu/kernel_account.h)\n");
  Json kernel_floors = Json::array();
  for (int b : batches) kernel_floors.push_back(PrintKernelAccount(config, element, floors, b));
  out["kernel_floors"] = kernel_floors;
  return WriteJson(out) ? 0 : 1;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_bench [--batches=1,8,64,256,1024] [--prefill_lengths=2048,32768] "
      "[--positions=1024,16384,262144] [--precision=bf16] [--min_seconds=1] [--json_out=FILE] "
      "[--shape=125m|based|gated_delta_net|gla|retnet|mamba2] [--profile_batch=B | "
      "--profile_prefill=N] [--profile_steps=50]\n"
      "The CUDA backend on the 125M (or Based, or Gated DeltaNet) shape against the HBM and GEMM "
      "floors measured "
      "in the same run; markdown on stdout.");
  absl::ParseCommandLine(argc, argv);
  return linserve::Main();
}
