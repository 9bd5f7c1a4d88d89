// CudaBackend against CpuBackend (the source of truth), whole model: logits of every model
// variant at every weight precision, greedy decoding, batch invariance, CUDA graphs, device
// sampling, slot operations and input validation.
#include "model/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "bench/gpu/kernel_account.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/dependent_launch.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "model/backend/state_precision.h"
#include "model/layers/kinds.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/random_model.h"
#ifdef LINSERVE_CUDA_EMULATION
#include "tests/gpu/emulation/launch_log.h"
#endif

namespace linserve {
namespace {

using gpu_test::ModelVariants;
using gpu_test::RandomTokens;
using gpu_test::RelativeError;
using gpu_test::Variant;
using ::testing::HasSubstr;

// fp32 weights: the GPU differs from the CPU only in summation order and FMA contraction, so
// logits agree to ~1e-6; the bound is 1e-4. bf16/fp16 weights round every weight and
// every GEMM input to 8/11 significant bits: the variant's narrow_tolerance (2e-2 but where the
// variant says why not).
double Tolerance(const Variant& variant, WeightPrecision precision) {
  return precision == WeightPrecision::kFp32 ? 1e-4 : variant.narrow_tolerance;
}

std::string Name(WeightPrecision precision) { return std::string(WeightPrecisionName(precision)); }

std::unique_ptr<CudaBackend> MakeCuda(const Model& model, BackendOptions options = {},
                                      CudaBackendOptions cuda_options = {}) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options, cuda_options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::unique_ptr<Backend> MakeCpu(const Model& model, BackendOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

SlotId Allocate(Backend& b) {
  absl::StatusOr<SlotId> s = b.AllocateSlot();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : SlotId{};
}

StateBlob Read(const Backend& b, SlotId slot) {
  StateBlob blob;
  EXPECT_TRUE(b.ReadSlot(slot, blob).ok());
  return blob;
}

TokenId Argmax(absl::Span<const float> logits) {
  return static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The variants the parity tests run over use every layer kind of model/layers/kinds.cc, so a
// kind added without a variant fails here, and one with a variant but without a CUDA component
// fails the parity tests (CreateCudaLayers aborts on it). Needs no device.
TEST(CudaBackendTest, ModelVariantsUseEveryLayerKind) {
  std::set<std::string> used;
  for (const Variant& variant : ModelVariants()) {
    for (const LayerSpec& layer : variant.config.LayerList()) {
      used.insert(layer.mixer.kind);
      used.insert(layer.norm.kind);
      used.insert(layer.mlp.kind);
    }
  }
  for (const MixerKind* kind : MixerKinds()) EXPECT_TRUE(used.contains(kind->name)) << kind->name;
  for (const NormKind* kind : NormKinds()) EXPECT_TRUE(used.contains(kind->name)) << kind->name;
  for (const MlpKind* kind : MlpKinds()) EXPECT_TRUE(used.contains(kind->name)) << kind->name;
}

// Prefill (every position's logits), then batched decode steps, then the final states: GPU
// against CPU for every variant and weight precision.
TEST(CudaBackendTest, LogitsMatchCpuForEveryVariantAndPrecision) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const int kPrompt = 150;  // two full chunks of 64 and a ragged one
  const int kSessions = 3;
  const int kSteps = 20;
  for (const Variant& variant : ModelVariants()) {
    const Model model = MakeRandomModel(variant.config, 11);
    const int64_t vocab = variant.config.vocab_size;
    std::unique_ptr<Backend> cpu = MakeCpu(model);
    std::vector<SlotId> cpu_slots;
    std::vector<std::vector<float>> cpu_prefill;
    for (int s = 0; s < kSessions; ++s) {
      cpu_slots.push_back(Allocate(*cpu));
      cpu_prefill.emplace_back(kPrompt * vocab);
      ASSERT_TRUE(cpu->Prefill(cpu_slots[s], RandomTokens(kPrompt, vocab, 100 + s),
                               absl::MakeSpan(cpu_prefill[s]))
                      .ok());
    }
    std::vector<std::vector<float>> cpu_steps;
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<int32_t> tokens = RandomTokens(kSessions, vocab, 200 + step);
      std::vector<DecodeItem> batch;
      for (int s = 0; s < kSessions; ++s) batch.push_back({cpu_slots[s], tokens[s]});
      cpu_steps.emplace_back(kSessions * vocab);
      ASSERT_TRUE(cpu->Decode(batch, absl::MakeSpan(cpu_steps.back())).ok());
    }

    for (WeightPrecision precision :
         {WeightPrecision::kFp32, WeightPrecision::kBf16, WeightPrecision::kFp16}) {
      SCOPED_TRACE(variant.name + " " + Name(precision));
      const double tolerance = Tolerance(variant, precision);
      BackendOptions options;
      options.weight_precision = precision;
      std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
      ASSERT_NE(gpu, nullptr);
      std::vector<SlotId> slots;
      for (int s = 0; s < kSessions; ++s) {
        slots.push_back(Allocate(*gpu));
        std::vector<float> logits(kPrompt * vocab);
        ASSERT_TRUE(
            gpu->Prefill(slots[s], RandomTokens(kPrompt, vocab, 100 + s), absl::MakeSpan(logits))
                .ok());
        EXPECT_LE(RelativeError(logits, cpu_prefill[s]), tolerance) << "prefill session " << s;
      }
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<int32_t> tokens = RandomTokens(kSessions, vocab, 200 + step);
        std::vector<DecodeItem> batch;
        for (int s = 0; s < kSessions; ++s) batch.push_back({slots[s], tokens[s]});
        std::vector<float> logits(kSessions * vocab);
        ASSERT_TRUE(gpu->Decode(batch, absl::MakeSpan(logits)).ok());
        EXPECT_LE(RelativeError(logits, cpu_steps[step]), tolerance) << "step " << step;
      }
      for (int s = 0; s < kSessions; ++s) {
        const StateBlob got = Read(*gpu, slots[s]);
        const StateBlob expect = Read(*cpu, cpu_slots[s]);
        EXPECT_EQ(got.position, expect.position);
        EXPECT_LE(RelativeError(got.state, expect.state), tolerance) << "state of session " << s;
      }
    }
  }
}

// An odd vocabulary (301, tied and untied heads) is stored padded to 320 rows (padded_vocab.h):
// the backend reports that stride, and nothing of the pad shows: Decode's logits are the CPU
// backend's within the fp32 bound, and on a copy of each session the device's greedy picks,
// logprobs and top alternatives are those of the real vocab_size columns of these logits (the 19
// pad logits are exactly 0, above many real ones: read by the sampler or the logprobs, they would
// add e^0 terms to every partition function and move every logprob).
TEST(CudaBackendTest, OddVocabularyIsPaddedAndThePadNeverShows) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kSessions = 3;
  constexpr int kSteps = 12;
  constexpr int kTop = 5;
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig config = TinyConfig();
    config.vocab_size = 301;
    config.tie_embeddings = tied;
    const Model model = MakeRandomModel(config, 19);
    const int64_t vocab = config.vocab_size;
    BackendOptions options;
    options.weight_precision = WeightPrecision::kFp32;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    std::unique_ptr<Backend> cpu = MakeCpu(model);
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(gpu->logits_stride(), 320);
    std::vector<SlotId> plain, sampled, reference;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    for (int s = 0; s < kSessions; ++s) {
      const std::vector<int32_t> prompt = RandomTokens(9 + s, vocab, 900 + s);
      plain.push_back(Allocate(*gpu));
      sampled.push_back(Allocate(*gpu));
      reference.push_back(Allocate(*cpu));
      ASSERT_TRUE(gpu->Prefill(plain[s], prompt, {}).ok());
      ASSERT_TRUE(gpu->CopySlot(plain[s], sampled[s]).ok());
      ASSERT_TRUE(gpu->StartSampling(sampled[s], greedy, kTop, prompt).ok());
      ASSERT_TRUE(cpu->Prefill(reference[s], prompt, {}).ok());
    }
    std::vector<int32_t> scratch;
    for (int step = 0; step < kSteps; ++step) {
      SCOPED_TRACE(step);
      const std::vector<int32_t> tokens = RandomTokens(kSessions, vocab, 950 + step);
      std::vector<DecodeItem> gpu_batch, sample_batch, cpu_batch;
      for (int s = 0; s < kSessions; ++s) {
        gpu_batch.push_back({plain[s], tokens[s]});
        sample_batch.push_back({sampled[s], tokens[s]});
        cpu_batch.push_back({reference[s], tokens[s]});
      }
      std::vector<float> logits(kSessions * vocab), cpu_logits(kSessions * vocab);
      ASSERT_TRUE(gpu->Decode(gpu_batch, absl::MakeSpan(logits)).ok());
      ASSERT_TRUE(cpu->Decode(cpu_batch, absl::MakeSpan(cpu_logits)).ok());
      EXPECT_LE(RelativeError(logits, cpu_logits), 1e-4);
      std::vector<TokenId> picks(kSessions, -1);
      std::vector<float> logprobs(kSessions);
      std::vector<TokenLogprob> top(kSessions * kMaxTopLogprobs);
      ASSERT_TRUE(gpu->DecodeAndSample(sample_batch, {.tokens = absl::MakeSpan(picks),
                                                      .logprobs = absl::MakeSpan(logprobs),
                                                      .top_logprobs = absl::MakeSpan(top)})
                      .ok());
      for (int s = 0; s < kSessions; ++s) {
        const absl::Span<const float> row = absl::MakeConstSpan(logits).subspan(s * vocab, vocab);
        EXPECT_EQ(picks[s], Argmax(row)) << "session " << s;
        EXPECT_NEAR(logprobs[s], LogProbOf(row, picks[s]), 1e-5) << "session " << s;
        std::vector<TokenLogprob> expected(kTop);
        TopLogprobsInto(row, kTop, nullptr, scratch, expected.data());
        for (int k = 0; k < kTop; ++k) {
          const TokenLogprob& got = top[s * kMaxTopLogprobs + k];
          EXPECT_EQ(got.token, expected[k].token) << "session " << s << " k " << k;
          EXPECT_NEAR(got.logprob, expected[k].logprob, 1e-5) << "session " << s << " k " << k;
        }
      }
    }
  }
}

// The acceptance check: 1000 greedy tokens with fp32 weights, GPU (sampling on the
// device) and CPU (argmax of its logits), identical.
TEST(CudaBackendTest, GreedyDecodeOf1000TokensEqualsCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[0].config, 12);
  const int64_t vocab = model.config.vocab_size;
  BackendOptions options;
  options.weight_precision = WeightPrecision::kFp32;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
  std::unique_ptr<Backend> cpu = MakeCpu(model);
  ASSERT_NE(gpu, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(40, vocab, 3);
  const SlotId g = Allocate(*gpu);
  const SlotId c = Allocate(*cpu);
  std::vector<float> cpu_logits(vocab);
  ASSERT_TRUE(gpu->Prefill(g, prompt, {}).ok());
  ASSERT_TRUE(cpu->Prefill(c, prompt, absl::MakeSpan(cpu_logits)).ok());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  ASSERT_TRUE(gpu->StartSampling(g, greedy, 0, prompt).ok());
  // The first generated token comes from the prompt's last logits; feed it to both.
  TokenId next = Argmax(cpu_logits);
  for (int i = 0; i < 1000; ++i) {
    const DecodeItem gpu_item{g, next};
    TokenId gpu_token = -1;
    ASSERT_TRUE(gpu->DecodeAndSample({&gpu_item, 1}, {.tokens = {&gpu_token, 1}}).ok());
    const DecodeItem cpu_item{c, next};
    ASSERT_TRUE(cpu->Decode({&cpu_item, 1}, absl::MakeSpan(cpu_logits)).ok());
    const TokenId cpu_token = Argmax(cpu_logits);
    ASSERT_EQ(gpu_token, cpu_token) << "token " << i;
    next = cpu_token;
  }
}

// A session decoded inside a batch of 256 against the same session decoded alone (a copy of
// its slot). Not bitwise: cuBLASLt picks different kernels (tile shapes, split-K) for M = 1 and
// M = 256, which changes the order of the fp32 sums; every other kernel is per-row. With fp32
// weights that is a ~1e-6 effect (bound 1e-5, and the greedy token must agree); with bf16 a
// last-bit difference can flip the rounding of an activation to bf16 (bound 2e-2).
TEST(CudaBackendTest, SessionInBatchOf256MatchesAlone) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[4].config, 13);
  const int64_t vocab = model.config.vocab_size;
  for (WeightPrecision precision : {WeightPrecision::kFp32, WeightPrecision::kBf16}) {
    SCOPED_TRACE(Name(precision));
    BackendOptions options;
    options.weight_precision = precision;
    options.max_batch_size = 256;
    options.max_slots = 300;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    std::vector<SlotId> slots;
    for (int s = 0; s < 256; ++s) {
      slots.push_back(Allocate(*gpu));
      ASSERT_TRUE(gpu->Prefill(slots.back(), RandomTokens(20 + s % 7, vocab, 300 + s), {}).ok());
    }
    const int probe = 137;  // position of the session in the batch
    const SlotId alone = Allocate(*gpu);
    ASSERT_TRUE(gpu->CopySlot(slots[probe], alone).ok());
    for (int step = 0; step < 8; ++step) {
      const std::vector<int32_t> tokens = RandomTokens(256, vocab, 400 + step);
      std::vector<DecodeItem> batch;
      for (int s = 0; s < 256; ++s) batch.push_back({slots[s], tokens[s]});
      std::vector<float> batch_logits(256 * vocab);
      ASSERT_TRUE(gpu->Decode(batch, absl::MakeSpan(batch_logits)).ok());
      std::vector<float> alone_logits(vocab);
      const DecodeItem item{alone, tokens[probe]};
      ASSERT_TRUE(gpu->Decode({&item, 1}, absl::MakeSpan(alone_logits)).ok());
      const absl::Span<const float> in_batch =
          absl::MakeConstSpan(batch_logits).subspan(probe * vocab, vocab);
      EXPECT_LE(RelativeError(in_batch, alone_logits),
                precision == WeightPrecision::kFp32 ? 1e-5 : 2e-2)
          << "step " << step;
      if (precision == WeightPrecision::kFp32) {
        EXPECT_EQ(Argmax(in_batch), Argmax(alone_logits)) << "step " << step;
      }
    }
  }
}

// Graph replay is the same sequence of kernels with the same plans: bitwise equal to launching
// them directly, for several buckets and across the first (capturing) and later calls.
TEST(CudaBackendTest, CudaGraphsGiveBitwiseTheEagerResults) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[1].config, 14);
  const int64_t vocab = model.config.vocab_size;
  BackendOptions options;
  options.max_batch_size = 24;  // buckets 1, 2, 4, 8, 16, 24
  CudaBackendOptions eager_options;
  eager_options.use_cuda_graphs = false;
  std::unique_ptr<CudaBackend> graphs = MakeCuda(model, options);
  std::unique_ptr<CudaBackend> eager = MakeCuda(model, options, eager_options);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(eager, nullptr);
  std::vector<SlotId> a, b;
  for (int s = 0; s < 24; ++s) {
    a.push_back(Allocate(*graphs));
    b.push_back(Allocate(*eager));
  }
  for (int step = 0; step < 12; ++step) {
    const int batch_size = std::vector<int>{1, 3, 24, 3, 17, 1, 5, 24, 2, 3, 9, 24}[step];
    const std::vector<int32_t> tokens = RandomTokens(batch_size, vocab, 500 + step);
    std::vector<DecodeItem> batch_a, batch_b;
    for (int i = 0; i < batch_size; ++i) {
      const int s = (i * 7 + step) % 24;  // a different set of sessions each step
      batch_a.push_back({a[s], tokens[i]});
      batch_b.push_back({b[s], tokens[i]});
    }
    // Distinct sessions within a step.
    std::sort(batch_a.begin(), batch_a.end(),
              [](const DecodeItem& x, const DecodeItem& y) { return x.slot < y.slot; });
    std::sort(batch_b.begin(), batch_b.end(),
              [](const DecodeItem& x, const DecodeItem& y) { return x.slot < y.slot; });
    std::vector<float> la(batch_size * vocab), lb(batch_size * vocab);
    ASSERT_TRUE(graphs->Decode(batch_a, absl::MakeSpan(la)).ok());
    ASSERT_TRUE(eager->Decode(batch_b, absl::MakeSpan(lb)).ok());
    EXPECT_EQ(la, lb) << "step " << step << ", batch " << batch_size;
  }
  for (int s = 0; s < 24; ++s) EXPECT_EQ(Read(*graphs, a[s]).state, Read(*eager, b[s]).state);
}

// Runs of kernels launched as programmatic dependents so far: the emulation's count; -1 on a GPU.
int64_t DependentKernelRuns() {
#ifdef LINSERVE_CUDA_EMULATION
  return emu::DependentKernelRuns();
#else
  return -1;
#endif
}

// Programmatic dependent launch (kernels/cuda/dependent_launch.cuh) changes when a kernel may
// start, never what it computes: for every variant, a prefill, graph-replayed decode steps of 1
// and 6 rows (the fused small-batch kernels and cuBLASLt's), greedy and sampled picks and the
// states after them are bitwise the same with it off, where each kernel starts only after the one
// before has finished. On a GPU this is the check that no kernel touches memory before it waits
// for its predecessor; under the emulation, which runs launches one after another and aborts when
// a dependent kernel's thread does not wait, it counts that the kernels launched as dependents
// only while it was on.
TEST(CudaBackendTest, DependentLaunchesGiveBitwiseTheSerializedResults) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  struct Run {
    std::vector<float> logits;
    std::vector<TokenId> picks;
    std::vector<std::vector<float>> states;
    int64_t dependent_runs = 0;
  };
  auto run = [](const Model& model, bool dependent) {
    cuda::SetDependentLaunch(dependent);
    absl::Cleanup restore = [] { cuda::SetDependentLaunch(true); };
    Run out;
    const int64_t before = DependentKernelRuns();
    BackendOptions options;
    options.weight_precision = WeightPrecision::kBf16;
    options.max_batch_size = 8;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    if (gpu == nullptr) return out;
    const int64_t vocab = model.config.vocab_size;
    std::vector<SlotId> slots;
    for (int s = 0; s < 6; ++s) slots.push_back(Allocate(*gpu));
    out.logits.resize(vocab);
    EXPECT_TRUE(
        gpu->Prefill(slots[0], RandomTokens(40, vocab, 21), absl::MakeSpan(out.logits)).ok());
    for (int s = 0; s < 6; ++s) {
      SamplingParams params;
      params.temperature = s < 3 ? 0.0f : 0.8f;
      params.top_p = 0.9f;
      params.seed = 100 + s;
      EXPECT_TRUE(gpu->StartSampling(slots[s], params, 0, {}).ok());
    }
    TokenId next[6] = {1, 2, 3, 4, 5, 6};
    for (int rows : {1, 6, 6, 1}) {
      std::vector<DecodeItem> items;
      for (int r = 0; r < rows; ++r) items.push_back({slots[r], next[r]});
      std::vector<TokenId> picks(rows);
      EXPECT_TRUE(gpu->DecodeAndSample(items, {.tokens = absl::MakeSpan(picks)}).ok());
      for (int r = 0; r < rows; ++r) next[r] = picks[r];
      out.picks.insert(out.picks.end(), picks.begin(), picks.end());
    }
    for (SlotId slot : slots) out.states.push_back(Read(*gpu, slot).state);
    gpu.reset();
    out.dependent_runs = DependentKernelRuns() - before;
    return out;
  };
  for (const Variant& variant : ModelVariants()) {
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 17);
    const Run dependent = run(model, true);
    const Run serialized = run(model, false);
    ASSERT_FALSE(dependent.logits.empty());
    EXPECT_EQ(dependent.logits, serialized.logits);
    EXPECT_EQ(dependent.picks, serialized.picks);
    EXPECT_EQ(dependent.states, serialized.states);
    if (DependentKernelRuns() >= 0) {
      EXPECT_GT(dependent.dependent_runs, 0);
      EXPECT_EQ(serialized.dependent_runs, 0);
    }
  }
}

// Device sampling against the host Sampler on the very logits the device sampled from: two
// copies of one session, one decoded with logits (sampled on the host), one with
// DecodeAndSample; both are then fed the same token.
TEST(CudaBackendTest, DecodeAndSampleEqualsHostSamplerOnTheSameLogits) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[2].config, 15);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  std::vector<SamplingParams> settings(4);
  settings[0].temperature = 0.9f;
  settings[0].seed = 1;
  settings[1].temperature = 1.2f;
  settings[1].top_k = 30;
  settings[1].top_p = 0.8f;
  settings[1].seed = 2;
  settings[2].min_p = 0.05f;
  settings[2].repetition_penalty = 1.3f;
  settings[2].presence_penalty = 0.4f;
  settings[2].frequency_penalty = 0.2f;
  settings[2].seed = 3;
  settings[3].temperature = 0.0f;
  settings[3].frequency_penalty = 1.0f;
  for (const SamplingParams& params : settings) {
    SCOPED_TRACE(params.seed);
    const std::vector<int32_t> prompt = RandomTokens(25, vocab, 600 + params.seed);
    const SlotId host_slot = Allocate(*gpu);
    const SlotId device_slot = Allocate(*gpu);
    ASSERT_TRUE(gpu->Prefill(host_slot, prompt, {}).ok());
    ASSERT_TRUE(gpu->CopySlot(host_slot, device_slot).ok());
    Sampler sampler(params);
    sampler.Observe(prompt);
    ASSERT_TRUE(gpu->StartSampling(device_slot, params, 0, prompt).ok());
    TokenId next = prompt.back();
    for (int step = 0; step < 60; ++step) {
      std::vector<float> logits(vocab);
      const DecodeItem host_item{host_slot, next};
      ASSERT_TRUE(gpu->Decode({&host_item, 1}, absl::MakeSpan(logits)).ok());
      const TokenId expect = sampler.Sample(logits);
      TokenId got = -1;
      const DecodeItem device_item{device_slot, next};
      ASSERT_TRUE(gpu->DecodeAndSample({&device_item, 1}, {.tokens = {&got, 1}}).ok());
      ASSERT_EQ(got, expect) << "step " << step;
      next = got;
    }
    gpu->FreeSlot(host_slot);
    gpu->FreeSlot(device_slot);
  }
}

// Runs of `kernel` so far: the emulation's launch log; -1 on a GPU (no log, no assertion).
int64_t KernelRuns(const char* kernel) {
#ifdef LINSERVE_CUDA_EMULATION
  return emu::KernelRuns(kernel);
#else
  (void)kernel;
  return -1;
#endif
}

// Times the host waited for the device so far: the emulation's count; -1 on a GPU.
int64_t HostWaits() {
#ifdef LINSERVE_CUDA_EMULATION
  return emu::HostWaits();
#else
  return -1;
#endif
}

// Operations the host enqueued itself so far: the emulation's count; -1 on a GPU.
int64_t HostEnqueues() {
#ifdef LINSERVE_CUDA_EMULATION
  return emu::HostEnqueues();
#else
  return -1;
#endif
}

// At a few rows of 16-bit weights a layer's projections carry what follows them in their own
// launch (small_batch_linear.h): an MLP's first layer its activation or gate, and every output
// projection the residual add + norm after it; and the embedding's kernel runs the first
// pre-norm at every batch. So a decode step of a model with a GELU MLP and of one with a gated MLP
// runs no elementwise kernel and no norm kernel at 1 and 4 rows, and from 5 rows (cuBLASLt) one
// elementwise kernel per layer and a norm after every mixer and MLP (launches counted under the
// emulation; the logits of both paths are LogitsMatchCpuForEveryVariantAndPrecision's).
TEST(CudaBackendTest, AFewRowsRunWhatFollowsAProjectionInItsLaunch) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  if (KernelRuns("AddNormKernel<T, kNorm, kCached>") < 0) {
    GTEST_SKIP() << "launches are counted when emulated";
  }
  auto elementwise = [] {
    return KernelRuns("BiasActivationKernel<T>") + KernelRuns("BiasGateKernel<T>");
  };
  auto norms = [] {
    int64_t n = 0;
    for (const char* cached : {"1", "2", "4", "8", "kAddNormMaxCached", "0"}) {
      n += KernelRuns(absl::StrCat("AddNormKernel<T, kNorm, ", cached, ">").c_str());
    }
    return n;
  };
  for (const Variant& variant : ModelVariants()) {
    if (variant.name != "pre_elu_sinusoidal_gelu" && variant.name != "rms_gated_silu_bias") {
      continue;
    }
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 12);
    BackendOptions options;
    options.weight_precision = WeightPrecision::kBf16;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    std::vector<DecodeItem> batch;
    for (int s = 0; s < 5; ++s) batch.push_back({Allocate(*gpu), 3 + s});
    const int64_t layers = variant.config.n_layers;
    for (int rows : {1, 4, 5}) {
      SCOPED_TRACE(testing::Message() << rows << " rows");
      std::vector<float> logits(rows * variant.config.vocab_size);
      const int64_t elementwise_before = elementwise();
      const int64_t norms_before = norms();
      ASSERT_TRUE(gpu->Decode(absl::MakeSpan(batch).first(rows), absl::MakeSpan(logits)).ok());
      EXPECT_EQ(elementwise() - elementwise_before, rows <= 4 ? 0 : layers);
      EXPECT_EQ(norms() - norms_before, rows <= 4 ? 0 : 2 * layers);
    }
  }
}

// A sliding window's rotation table depends on its shape alone: each window layer fills it once,
// when the backend starts, and no prefill or decode step launches it again (it cost a launch per
// layer and step on an H200, bench/results/gpu.md). Counted under the emulation.
TEST(CudaBackendTest, TheRotationTableIsFilledOnceNotEveryStep) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  if (KernelRuns("RotationTableKernel") < 0) GTEST_SKIP() << "launches are counted when emulated";
  for (const Variant& variant : ModelVariants()) {
    if (variant.name != "window4_layer_norm_ffn") continue;
    const Model model = MakeRandomModel(variant.config, 13);
    const int64_t before = KernelRuns("RotationTableKernel");
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(KernelRuns("RotationTableKernel") - before, variant.config.n_layers);
    const SlotId slot = Allocate(*gpu);
    const int64_t vocab = variant.config.vocab_size;
    std::vector<float> logits(20 * vocab);
    ASSERT_TRUE(gpu->Prefill(slot, RandomTokens(20, vocab, 5), absl::MakeSpan(logits)).ok());
    for (int step = 0; step < 3; ++step) {
      const DecodeItem item{slot, 7 + step};
      ASSERT_TRUE(gpu->Decode({&item, 1}, absl::MakeSpan(logits).first(vocab)).ok());
    }
    EXPECT_EQ(KernelRuns("RotationTableKernel") - before, variant.config.n_layers);
  }
}

// The kernel account (bench/gpu/kernel_account.h) names, by its rows' patterns, every kernel a
// decode step and a prefill launch, for every variant: at 1–4 rows of bf16 weights (the fused
// projections) and at 6, and for a 150-token prefill; so a profile on a GPU
// (bench/gpu/kernel_report.py) puts no kernel under "other". Launches counted under the
// emulation, matched as kernel_report.py matches a profile's names.
TEST(CudaBackendTest, TheKernelAccountNamesEveryKernelAStepLaunches) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
#ifndef LINSERVE_CUDA_EMULATION
  GTEST_SKIP() << "launches are counted when emulated";
#else
  // The kernels that ran during `run`, by name.
  auto launched = [](const std::function<void()>& run) {
    const std::map<std::string, int64_t> before = emu::KernelRunCounts();
    run();
    std::set<std::string> names;
    for (const auto& [name, runs] : emu::KernelRunCounts()) {
      const auto it = before.find(name);
      if (runs > (it == before.end() ? 0 : it->second)) names.insert(name);
    }
    return names;
  };
  auto expect_named = [](const std::set<std::string>& names,
                         const absl::StatusOr<std::vector<KernelCost>>& account) {
    ASSERT_TRUE(account.ok()) << account.status();
    for (const std::string& name : names) {
      bool named = false;
      for (const KernelCost& k : *account) {
        const std::string pattern = k.cuda_kernels.empty()
                                        ? "SmallBatchLinearKernel"  // kernel_report's GEMM names
                                        : k.cuda_kernels;
        named = named || std::regex_search(name, std::regex("\\b(" + pattern + ")\\b"));
      }
      EXPECT_TRUE(named) << name << " is in no row of the account";
    }
  };
  for (const Variant& variant : ModelVariants()) {
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 14);
    BackendOptions options;
    options.weight_precision = WeightPrecision::kBf16;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    const int64_t vocab = model.config.vocab_size;
    std::vector<SlotId> slots;
    for (int s = 0; s < 6; ++s) slots.push_back(Allocate(*gpu));
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    const std::set<std::string> prefill = launched([&] {
      std::vector<float> logits(vocab);
      ASSERT_TRUE(gpu->Prefill(slots[0], RandomTokens(150, vocab, 3), absl::MakeSpan(logits)).ok());
    });
    expect_named(prefill, PrefillKernelAccount(model.config, 150, 64, 64, 2));
    for (SlotId slot : slots) ASSERT_TRUE(gpu->StartSampling(slot, greedy, 0, {}).ok());
    for (int rows : {1, 4, 6}) {
      SCOPED_TRACE(testing::Message() << rows << " rows");
      const std::set<std::string> decode = launched([&] {
        std::vector<DecodeItem> items;
        for (int r = 0; r < rows; ++r) items.push_back({slots[r], 5 + r});
        std::vector<TokenId> tokens(rows);
        ASSERT_TRUE(gpu->DecodeAndSample(items, {.tokens = absl::MakeSpan(tokens)}).ok());
      });
      expect_named(decode, DecodeKernelAccount(model.config, rows, 2));
    }
  }
#endif
}

// The work of a step follows its rows' parameters: a greedy session without penalties runs the
// argmax kernel only and its prompt launches no count kernel; forked and restarted with
// penalties and a temperature, its prompt, the pending first prompt and the picks so far are
// all counted (the picks equal the host Sampler's, which has seen them all), and only the draw
// kernel runs. The launch counts are asserted under the emulation, the picks everywhere.
TEST(CudaBackendTest, PenaltyCountsAndSamplingKernelsOnlyWhereAStepNeedsThem) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[2].config, 16);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  const bool logged = KernelRuns("ArgmaxKernel") >= 0;
  auto runs = [&](const char* kernel) { return logged ? KernelRuns(kernel) : 0; };
  const std::vector<int32_t> prompt = RandomTokens(25, vocab, 700);
  const SlotId host_slot = Allocate(*gpu);
  const SlotId slot = Allocate(*gpu);
  ASSERT_TRUE(gpu->Prefill(host_slot, prompt, {}).ok());
  ASSERT_TRUE(gpu->CopySlot(host_slot, slot).ok());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler sampler(greedy);
  sampler.Observe(prompt);
  const int64_t counts_before = runs("CountTokensKernel");
  ASSERT_TRUE(gpu->StartSampling(slot, greedy, 0, prompt).ok());
  EXPECT_EQ(runs("CountTokensKernel"), counts_before) << "no penalty: no count kernel";
  TokenId next = prompt.back();
  // Steps of `device_slot` in lockstep with host_slot, whose logits the host Sampler picks from.
  auto steps = [&](SlotId device_slot, int n) {
    for (int step = 0; step < n; ++step) {
      std::vector<float> logits(vocab);
      const DecodeItem host_item{host_slot, next};
      ASSERT_TRUE(gpu->Decode({&host_item, 1}, absl::MakeSpan(logits)).ok());
      const TokenId expect = sampler.Sample(logits);
      TokenId got = -1;
      const DecodeItem device_item{device_slot, next};
      ASSERT_TRUE(gpu->DecodeAndSample({&device_item, 1}, {.tokens = {&got, 1}}).ok());
      ASSERT_EQ(got, expect) << "step " << step;
      next = got;
    }
  };
  int64_t argmax_before = runs("ArgmaxKernel");
  int64_t sample_before = runs("SampleKernel");
  steps(slot, 20);
  if (logged) {
    EXPECT_EQ(runs("ArgmaxKernel"), argmax_before + 20);
    EXPECT_EQ(runs("SampleKernel"), sample_before);
  }

  const SlotId fork = Allocate(*gpu);
  ASSERT_TRUE(gpu->CopySlot(slot, fork).ok());
  SamplingParams penalised;
  penalised.temperature = 0.7f;
  penalised.repetition_penalty = 1.5f;
  penalised.presence_penalty = 0.8f;
  penalised.frequency_penalty = 0.6f;
  penalised.seed = 9;
  const std::vector<int32_t> second = RandomTokens(10, vocab, 701);
  sampler.Restart(penalised);
  sampler.Observe(second);
  ASSERT_TRUE(gpu->StartSampling(fork, penalised, 0, second).ok());
  if (logged) {
    EXPECT_GT(runs("CountTokensKernel"), counts_before);
  }
  argmax_before = runs("ArgmaxKernel");
  sample_before = runs("SampleKernel");
  steps(fork, 30);
  if (logged) {
    EXPECT_EQ(runs("ArgmaxKernel"), argmax_before);
    EXPECT_EQ(runs("SampleKernel"), sample_before + 30);
  }
}

// A token mask over `vocab` allowing `allowed`.
std::vector<uint32_t> MaskOf(int64_t vocab, const std::vector<TokenId>& allowed) {
  std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32), 0);
  for (TokenId t : allowed) mask[t / 32] |= uint32_t{1} << (t % 32);
  return mask;
}

// Every `stride`-th token from `first`.
std::vector<uint32_t> StridedMask(int64_t vocab, int first, int stride) {
  std::vector<TokenId> allowed;
  for (TokenId t = first % stride; t < vocab; t += stride) allowed.push_back(t);
  return MaskOf(vocab, allowed);
}

// Token masks on the device: a batch whose rows are greedy, sampled with every filter and
// penalty, and plain, with masks on some rows only (one-token masks at some steps), picks and
// reports the logprobs of what the host Sampler does with the same mask on the same logits,
// whether the step is run by DecodeAndSample or launched and collected; PrefillAndSample and
// PrefillBatch take their masks too.
TEST(CudaBackendTest, TokenMasksGiveTheHostSamplersPicksAndLogprobs) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig config = TinyConfig();
  config.tie_embeddings = false;
  const Model model = MakeRandomModel(config, 29);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  std::vector<SamplingParams> settings(4);
  settings[0].temperature = 0.0f;
  settings[0].repetition_penalty = 1.3f;
  settings[1].temperature = 0.9f;
  settings[1].top_k = 20;
  settings[1].top_p = 0.9f;
  settings[1].min_p = 0.02f;
  settings[1].presence_penalty = 0.4f;
  settings[1].frequency_penalty = 0.2f;
  settings[1].seed = 2;
  settings[2].seed = 3;
  settings[3].temperature = 1.3f;
  settings[3].top_p = 0.7f;
  settings[3].seed = 4;
  const int rows = static_cast<int>(settings.size());
  std::vector<SlotId> host_slots, device_slots;
  std::vector<Sampler> samplers;
  std::vector<TokenId> next;
  std::vector<float> logits(vocab);
  for (int r = 0; r < rows; ++r) {
    const std::vector<int32_t> prompt = RandomTokens(12 + r, vocab, 700 + r);
    host_slots.push_back(Allocate(*gpu));
    device_slots.push_back(Allocate(*gpu));
    samplers.emplace_back(settings[r]);
    samplers.back().Observe(prompt);
    ASSERT_TRUE(gpu->StartSampling(device_slots[r], settings[r], /*top_logprobs=*/3, prompt).ok());
    ASSERT_TRUE(gpu->Prefill(host_slots[r], prompt, absl::MakeSpan(logits)).ok());
    // The first pick: PrefillAndSample under a mask on rows 0 and 1.
    const std::vector<uint32_t> mask = StridedMask(vocab, r, 4);
    const uint32_t* row_mask = r < 2 ? mask.data() : nullptr;
    TokenId token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top(kMaxTopLogprobs);
    ASSERT_TRUE(gpu->PrefillAndSample(device_slots[r], prompt,
                                      {{&token, 1}, {&logprob, 1}, absl::MakeSpan(top)}, row_mask)
                    .ok());
    ASSERT_EQ(token, samplers[r].Sample(logits, row_mask)) << "row " << r;
    EXPECT_FLOAT_EQ(logprob, LogProbOf(logits, token, row_mask));
    next.push_back(token);
  }
  std::vector<TokenId> tokens(rows);
  std::vector<float> logprobs(rows);
  std::vector<TokenLogprob> top(static_cast<size_t>(rows) * kMaxTopLogprobs);
  const SampleOutput out{absl::MakeSpan(tokens), absl::MakeSpan(logprobs), absl::MakeSpan(top)};
  for (int step = 0; step < 24; ++step) {
    SCOPED_TRACE(step);
    // Rows 0, 1 and 3 masked (row 3 to a single token every fourth step), row 2 never.
    std::vector<std::vector<uint32_t>> masks(rows);
    masks[0] = StridedMask(vocab, step, 3);
    masks[1] = StridedMask(vocab, step + 1, 2);
    masks[3] = step % 4 == 0 ? MaskOf(vocab, {static_cast<TokenId>((step * 37) % vocab)})
                             : StridedMask(vocab, step, 5);
    std::vector<DecodeItem> batch;
    for (int r = 0; r < rows; ++r) {
      batch.push_back({device_slots[r], next[r], masks[r].empty() ? nullptr : masks[r].data()});
    }
    if (step % 2 == 0) {
      ASSERT_TRUE(gpu->DecodeAndSample(batch, out).ok());
    } else {
      ASSERT_TRUE(gpu->LaunchDecodeAndSample(batch, out).ok());
      ASSERT_TRUE(gpu->CollectSamples().ok());
    }
    for (int r = 0; r < rows; ++r) {
      const DecodeItem host_item{host_slots[r], next[r]};
      ASSERT_TRUE(gpu->Decode({&host_item, 1}, absl::MakeSpan(logits)).ok());
      const uint32_t* mask = batch[r].allowed_tokens;
      ASSERT_EQ(tokens[r], samplers[r].Sample(logits, mask)) << "row " << r;
      EXPECT_FLOAT_EQ(logprobs[r], LogProbOf(logits, tokens[r], mask)) << "row " << r;
      const std::vector<TokenLogprob> expected = TopLogprobs(logits, 3, mask);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(top[r * kMaxTopLogprobs + k].token, expected[k].token) << "row " << r;
        EXPECT_FLOAT_EQ(top[r * kMaxTopLogprobs + k].logprob, expected[k].logprob);
      }
    }
    if (step % 4 == 0) {
      EXPECT_EQ(tokens[3], (step * 37) % vocab);
    }
    next = tokens;
  }

  // PrefillBatch: a one-token mask, an unmasked item, a strided mask.
  const std::vector<uint32_t> one = MaskOf(vocab, {11});
  const std::vector<uint32_t> strided = StridedMask(vocab, 1, 3);
  std::vector<SlotId> fresh;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    fresh.push_back(Allocate(*gpu));
    prompts.push_back(RandomTokens(6 + i, vocab, 800 + i));
    ASSERT_TRUE(gpu->StartSampling(fresh[i], settings[i + 1], 0, prompts[i]).ok());
  }
  const std::vector<PrefillItem> items = {
      {.slot = fresh[0], .tokens = prompts[0], .sample = true, .allowed_tokens = one.data()},
      {.slot = fresh[1], .tokens = prompts[1], .sample = true},
      {.slot = fresh[2], .tokens = prompts[2], .sample = true, .allowed_tokens = strided.data()}};
  std::vector<TokenId> picked(3);
  ASSERT_TRUE(gpu->PrefillBatch(items, {.tokens = absl::MakeSpan(picked)}).ok());
  EXPECT_EQ(picked[0], 11);
  EXPECT_EQ(picked[2] % 3, 1) << picked[2];
}

// Logit biases: each row picks what the host Sampler picks with the same biases (greedy with a
// ban and a lift, sampled with penalties and filters, under a mask, and a row without biases in
// the same batch); a fork made with CopySlot carries the biases and picks what its origin picks;
// a later StartSampling without biases drops them; an id outside the vocabulary is refused.
TEST(CudaBackendTest, LogitBiasGivesTheHostSamplersPicksForkedAndInABatch) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig config = TinyConfig();
  config.tie_embeddings = false;
  const Model model = MakeRandomModel(config, 31);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  auto biases = [vocab](int seed) {
    std::vector<LogitBias> out;
    for (int i = 0; i < 40; ++i) {
      out.push_back({static_cast<TokenId>((seed * 53 + i * 7) % vocab),
                     i == 0 ? -100.0f : 0.5f * static_cast<float>(i % 9 - 4)});
    }
    return out;
  };
  std::vector<SamplingParams> settings(4);
  settings[0].temperature = 0.0f;
  settings[0].repetition_penalty = 1.2f;
  settings[0].logit_bias = biases(1);
  settings[1].temperature = 0.9f;
  settings[1].top_k = 20;
  settings[1].top_p = 0.9f;
  settings[1].presence_penalty = 0.4f;
  settings[1].seed = 2;
  settings[1].logit_bias = biases(2);
  settings[2].seed = 3;
  settings[2].logit_bias = biases(3);
  settings[3].temperature = 1.1f;
  settings[3].seed = 4;
  const int rows = static_cast<int>(settings.size());
  std::vector<SlotId> host_slots, device_slots, forks;
  std::vector<Sampler> samplers;
  std::vector<TokenId> next;
  std::vector<float> logits(vocab);
  for (int r = 0; r < rows; ++r) {
    const std::vector<int32_t> prompt = RandomTokens(10 + r, vocab, 900 + r);
    host_slots.push_back(Allocate(*gpu));
    device_slots.push_back(Allocate(*gpu));
    forks.push_back(Allocate(*gpu));
    samplers.emplace_back(settings[r]);
    samplers.back().Observe(prompt);
    ASSERT_TRUE(gpu->StartSampling(device_slots[r], settings[r], 0, prompt).ok());
    ASSERT_TRUE(gpu->Prefill(host_slots[r], prompt, absl::MakeSpan(logits)).ok());
    TokenId token = -1;
    ASSERT_TRUE(gpu->PrefillAndSample(device_slots[r], prompt, {.tokens = {&token, 1}}, nullptr)
                    .ok());
    ASSERT_EQ(token, samplers[r].Sample(logits)) << "row " << r;
    ASSERT_TRUE(gpu->CopySlot(device_slots[r], forks[r]).ok());
    next.push_back(token);
  }
  std::vector<TokenId> tokens(2 * rows);
  for (int step = 0; step < 16; ++step) {
    SCOPED_TRACE(step);
    const std::vector<uint32_t> mask = StridedMask(vocab, step, 3);
    const uint32_t* row2_mask = step % 2 == 0 ? mask.data() : nullptr;
    std::vector<DecodeItem> batch;
    for (int r = 0; r < rows; ++r) {
      batch.push_back({device_slots[r], next[r], r == 2 ? row2_mask : nullptr});
    }
    for (int r = 0; r < rows; ++r) batch.push_back({forks[r], next[r], batch[r].allowed_tokens});
    ASSERT_TRUE(gpu->DecodeAndSample(batch, {.tokens = absl::MakeSpan(tokens)}).ok());
    for (int r = 0; r < rows; ++r) {
      const DecodeItem host_item{host_slots[r], next[r]};
      ASSERT_TRUE(gpu->Decode({&host_item, 1}, absl::MakeSpan(logits)).ok());
      ASSERT_EQ(tokens[r], samplers[r].Sample(logits, batch[r].allowed_tokens)) << "row " << r;
      ASSERT_EQ(tokens[rows + r], tokens[r]) << "fork of row " << r;
      next[r] = tokens[r];
    }
  }
  // Restarted without biases, row 0 is plain greedy with its penalty again.
  SamplingParams plain = settings[0];
  plain.logit_bias.clear();
  ASSERT_TRUE(gpu->StartSampling(device_slots[0], plain, 0, {}).ok());
  samplers[0].Restart(plain);
  const DecodeItem host_item{host_slots[0], next[0]};
  ASSERT_TRUE(gpu->Decode({&host_item, 1}, absl::MakeSpan(logits)).ok());
  const DecodeItem device_item{device_slots[0], next[0]};
  TokenId token = -1;
  ASSERT_TRUE(gpu->DecodeAndSample({&device_item, 1}, {.tokens = {&token, 1}}).ok());
  EXPECT_EQ(token, samplers[0].Sample(logits));

  SamplingParams outside;
  outside.logit_bias = {{static_cast<TokenId>(vocab), 1.0f}};
  const absl::Status status = gpu->StartSampling(forks[0], outside, 0, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("logit_bias: token ", vocab,
                                                       " is outside the vocabulary")));
}

// A mask that allows no token of the vocabulary is INVALID_ARGUMENT naming the row, before the
// step runs: the slots stay where they were.
TEST(CudaBackendTest, AMaskAllowingNoTokenIsRefusedBeforeTheStep) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 31);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  const SlotId a = Allocate(*gpu), b = Allocate(*gpu);
  for (SlotId s : {a, b}) ASSERT_TRUE(gpu->StartSampling(s, SamplingParams(), 0, {}).ok());
  std::vector<uint32_t> nothing((vocab + 31) / 32, 0);
  if (vocab % 32 != 0) nothing.back() = ~uint32_t{0} << (vocab % 32);  // past the vocabulary
  const std::vector<uint32_t> fine = StridedMask(vocab, 0, 2);
  const DecodeItem batch[] = {{a, 1, fine.data()}, {b, 2, nothing.data()}};
  TokenId out[2];
  absl::Status status = gpu->DecodeAndSample(batch, {.tokens = out});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("row 1's allowed_tokens allows no token"));
  status = gpu->LaunchDecodeAndSample(batch, {.tokens = out});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> prompt = {1, 2, 3};
  status = gpu->PrefillAndSample(a, prompt, {.tokens = {out, 1}}, nothing.data());
  EXPECT_THAT(status.message(), HasSubstr("PrefillAndSample: row 0's allowed_tokens"));
  const PrefillItem item{
      .slot = a, .tokens = prompt, .sample = true, .allowed_tokens = nothing.data()};
  status = gpu->PrefillBatch({&item, 1}, {.tokens = {out, 1}});
  EXPECT_THAT(status.message(), HasSubstr("PrefillBatch: row 0's allowed_tokens"));
  EXPECT_EQ(*gpu->SlotPosition(a), 0);
  EXPECT_EQ(*gpu->SlotPosition(b), 0);
}

// A forked slot carries its sampler: both branches draw the same tokens.
TEST(CudaBackendTest, CopySlotForksTheSampler) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 16);
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  const SlotId a = Allocate(*gpu);
  const SlotId b = Allocate(*gpu);
  const std::vector<int32_t> prompt = RandomTokens(10, model.config.vocab_size, 5);
  ASSERT_TRUE(gpu->Prefill(a, prompt, {}).ok());
  SamplingParams params;
  params.seed = 77;
  ASSERT_TRUE(gpu->StartSampling(a, params, 0, prompt).ok());
  TokenId token = -1;
  const DecodeItem first{a, prompt.back()};
  ASSERT_TRUE(gpu->DecodeAndSample({&first, 1}, {.tokens = {&token, 1}}).ok());
  ASSERT_TRUE(gpu->CopySlot(a, b).ok());
  TokenId ta = token, tb = token;
  for (int i = 0; i < 30; ++i) {
    const DecodeItem batch[] = {{a, ta}, {b, tb}};
    TokenId out[2];
    ASSERT_TRUE(gpu->DecodeAndSample(batch, {.tokens = out}).ok());
    ASSERT_EQ(out[0], out[1]) << "step " << i;
    ta = out[0];
    tb = out[1];
  }
}

TEST(CudaBackendTest, DecodeAndSampleNeedsStartSampling) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 17);
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  const SlotId slot = Allocate(*gpu);
  const DecodeItem item{slot, 1};
  TokenId token;
  absl::Status status = gpu->DecodeAndSample({&item, 1}, {.tokens = {&token, 1}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("StartSampling"));
  SamplingParams bad;
  bad.top_p = 0.0f;
  status = gpu->StartSampling(slot, bad, 0, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("top_p"));
  ASSERT_TRUE(gpu->StartSampling(slot, SamplingParams(), 0, {}).ok());
  ASSERT_TRUE(gpu->DecodeAndSample({&item, 1}, {.tokens = {&token, 1}}).ok());
  ASSERT_TRUE(gpu->ResetSlot(slot).ok());  // clears the sampler
  EXPECT_EQ(gpu->DecodeAndSample({&item, 1}, {.tokens = {&token, 1}}).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Chunk sizes 1, 7, 64 and 128 and prompts longer than one 2048-token pass all leave the state
// of the token-by-token recurrence (on the GPU itself).
TEST(CudaBackendTest, ChunkedPrefillEqualsRecurrence) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[0].config, 18);
  const int64_t vocab = model.config.vocab_size;
  BackendOptions options;
  options.weight_precision = WeightPrecision::kFp32;
  std::unique_ptr<CudaBackend> recurrent = MakeCuda(model, options);
  ASSERT_NE(recurrent, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(2500, vocab, 7);
  const SlotId r = Allocate(*recurrent);
  std::vector<float> step_logits(vocab);
  for (TokenId t : tokens) {
    const DecodeItem item{r, t};
    ASSERT_TRUE(recurrent->Decode({&item, 1}, absl::MakeSpan(step_logits)).ok());
  }
  const StateBlob expect = Read(*recurrent, r);
  for (int chunk : {1, 7, 64, 128}) {
    SCOPED_TRACE(chunk);
    options.prefill_chunk_size = chunk;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    const SlotId slot = Allocate(*gpu);
    std::vector<float> all(tokens.size() * vocab);
    ASSERT_TRUE(gpu->Prefill(slot, tokens, absl::MakeSpan(all)).ok());
    const StateBlob got = Read(*gpu, slot);
    EXPECT_EQ(got.position, expect.position);
    EXPECT_LE(RelativeError(got.state, expect.state), 1e-5);
    EXPECT_LE(
        RelativeError(absl::MakeConstSpan(all).subspan((tokens.size() - 1) * vocab), step_logits),
        1e-5);
  }
}

// Every layer-list variant (the kinds of model/layers/ other than the single block's): a prompt
// fed as prefill pieces of 1, 2, 7, 64 and 150 tokens (each continuing the state the previous
// one left; a piece shorter than a short convolution's kernel − 1 keeps older state rows, 64 and
// 150 cross chunk boundaries), at chunk sizes 1, 7 and 64, gives the logits at every position
// and the state of feeding it token by token through decode (1e-5, the chunked-vs-recurrent
// bound).
TEST(CudaBackendTest, LayerListPrefillInPiecesEqualsTokenByTokenDecode) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  int tested = 0;
  for (const Variant& variant : ModelVariants()) {
    if (variant.config.IsSingleBlock()) continue;
    SCOPED_TRACE(variant.name);
    ++tested;
    const Model model = MakeRandomModel(variant.config, 25);
    const int64_t vocab = model.config.vocab_size;
    BackendOptions options;
    options.weight_precision = WeightPrecision::kFp32;
    const std::vector<size_t> pieces = {1, 2, 7, 64, 150};
    const std::vector<int32_t> tokens = RandomTokens(1 + 2 + 7 + 64 + 150, vocab, 26);
    std::unique_ptr<CudaBackend> recurrent = MakeCuda(model, options);
    ASSERT_NE(recurrent, nullptr);
    const SlotId r = Allocate(*recurrent);
    std::vector<float> step_logits(tokens.size() * vocab);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const DecodeItem item{r, tokens[t]};
      ASSERT_TRUE(
          recurrent->Decode({&item, 1}, absl::MakeSpan(step_logits).subspan(t * vocab, vocab))
              .ok());
    }
    const StateBlob expect = Read(*recurrent, r);
    for (int chunk : {1, 7, 64}) {
      SCOPED_TRACE(chunk);
      options.prefill_chunk_size = chunk;
      std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
      ASSERT_NE(gpu, nullptr);
      const SlotId slot = Allocate(*gpu);
      size_t first = 0;
      for (size_t piece : pieces) {
        SCOPED_TRACE(piece);
        std::vector<float> logits(piece * vocab);
        ASSERT_TRUE(gpu->Prefill(slot, absl::MakeConstSpan(tokens).subspan(first, piece),
                                 absl::MakeSpan(logits))
                        .ok());
        EXPECT_LE(RelativeError(logits, absl::MakeConstSpan(step_logits)
                                            .subspan(first * vocab, piece * vocab)),
                  1e-5);
        first += piece;
      }
      const StateBlob got = Read(*gpu, slot);
      EXPECT_EQ(got.position, expect.position);
      EXPECT_LE(RelativeError(got.state, expect.state), 1e-5);
    }
  }
  EXPECT_GE(tested, 4);
}

// A varlen batch: sessions at different positions, prompts from one token to more than one
// 2048-row pass in all (so one item is cut between passes), every other item sampling (greedy;
// one with top_logprobs). Each session's state equals feeding it alone, on the GPU (1e-5: the
// GEMMs over all of a pass's rows may round otherwise than over one session's) and on the CPU's
// batched prefill (the fp32 bound); the picks and logprobs match too. Under the emulation: the
// prefill attention runs once per layer and pass for all the sessions, as for one alone.
TEST(CudaBackendTest, PrefillBatchEqualsEachSessionAloneAndTheCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(gpu_test::ModelVariants()[0].config, 24);
  const int vocab = model.config.vocab_size;
  BackendOptions options;
  options.weight_precision = WeightPrecision::kFp32;
  std::unique_ptr<CudaBackend> batched = MakeCuda(model, options);
  std::unique_ptr<CudaBackend> alone = MakeCuda(model, options);
  std::unique_ptr<Backend> cpu = MakeCpu(model, options);
  ASSERT_NE(batched, nullptr);
  ASSERT_NE(alone, nullptr);
  const std::vector<int> history = {0, 10, 70, 0, 5};
  const std::vector<int> lengths = {1, 64, 1500, 900, 3};
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<PrefillItem> batch;
  std::vector<TokenId> alone_tokens;
  std::vector<float> alone_logprobs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const std::vector<int32_t> before = RandomTokens(history[i], vocab, 40 + i);
    prompts.push_back(RandomTokens(lengths[i], vocab, 50 + i));
    const int32_t top = i == 1 ? 3 : 0;
    const SlotId slot = Allocate(*batched);
    ASSERT_EQ(Allocate(*alone), slot);
    ASSERT_EQ(Allocate(*cpu), slot);
    for (Backend* b :
         {static_cast<Backend*>(batched.get()), static_cast<Backend*>(alone.get()), cpu.get()}) {
      if (!before.empty()) {
        ASSERT_TRUE(b->Prefill(slot, before, {}).ok());
      }
      ASSERT_TRUE(b->StartSampling(slot, greedy, top, {}).ok());
    }
    const bool sample = i % 2 == 1;
    batch.push_back({.slot = slot, .tokens = prompts.back(), .sample = sample});
    if (!sample) {
      ASSERT_TRUE(alone->Prefill(slot, prompts.back(), {}).ok());
      continue;
    }
    TokenId token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> alternatives(kMaxTopLogprobs);
    ASSERT_TRUE(alone
                    ->PrefillAndSample(slot, prompts.back(),
                                       {{&token, 1}, {&logprob, 1}, absl::MakeSpan(alternatives)},
                                       nullptr)
                    .ok());
    alone_tokens.push_back(token);
    alone_logprobs.push_back(logprob);
  }
  // One pass of one session: the attention kernel's runs per pass (the emulation logs a kernel by
  // its name as launched, template arguments included).
  const int64_t before_one = KernelRuns("ChunkOutputKernel<T, S>");
  const SlotId probe = Allocate(*alone);
  ASSERT_TRUE(alone->Prefill(probe, RandomTokens(5, vocab, 49), {}).ok());
  const int64_t per_pass = KernelRuns("ChunkOutputKernel<T, S>") - before_one;
  const size_t rows = alone_tokens.size();
  std::vector<TokenId> tokens(rows, -1), cpu_tokens(rows, -1);
  std::vector<float> logprobs(rows), cpu_logprobs(rows);
  std::vector<TokenLogprob> top(rows * kMaxTopLogprobs), cpu_top(rows * kMaxTopLogprobs);
  const int64_t before_batch = KernelRuns("ChunkOutputKernel<T, S>");
  ASSERT_TRUE(batched
                  ->PrefillBatch(batch, {absl::MakeSpan(tokens), absl::MakeSpan(logprobs),
                                         absl::MakeSpan(top)})
                  .ok());
  if (before_batch >= 0) {
    EXPECT_GT(per_pass, 0);
    EXPECT_EQ(KernelRuns("ChunkOutputKernel<T, S>") - before_batch, 2 * per_pass);  // two passes
  }
  ASSERT_TRUE(cpu->PrefillBatch(batch, {absl::MakeSpan(cpu_tokens), absl::MakeSpan(cpu_logprobs),
                                        absl::MakeSpan(cpu_top)})
                  .ok());
  EXPECT_EQ(tokens, alone_tokens);
  EXPECT_EQ(tokens, cpu_tokens);
  // Row 0 is item 1, the one with top_logprobs.
  EXPECT_NEAR(logprobs[0], alone_logprobs[0], 1e-5);
  EXPECT_NEAR(logprobs[0], cpu_logprobs[0], 1e-4);
  for (size_t i = 0; i < batch.size(); ++i) {
    SCOPED_TRACE(i);
    const StateBlob got = Read(*batched, batch[i].slot);
    EXPECT_EQ(got.position, history[i] + lengths[i]);
    EXPECT_LE(RelativeError(got.state, Read(*alone, batch[i].slot).state), 1e-5);
    EXPECT_LE(RelativeError(got.state, Read(*cpu, batch[i].slot).state), 1e-4);
  }
}

// Export from one backend, import into the other, continue: the CPU and GPU state layouts are
// the same, so a session can move between devices, both ways. For the single-block model (also
// at a far position: sinusoidal phase at 300 000), a Based model, the window-80 model and a gated
// DeltaNet, after 200 tokens (every sliding-window ring has wrapped).
TEST(CudaBackendTest, StateMovesBetweenCpuAndGpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<Variant> variants = {{"tiny", TinyConfig()}};
  for (const Variant& v : ModelVariants()) {
    if (v.name == "based_mixed" || v.name == "window80_layer_norm_ffn" ||
        v.name == "gated_delta_net_fla_block") {
      variants.push_back(v);
    }
  }
  ASSERT_EQ(variants.size(), 4u);
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 19);
    const int64_t vocab = model.config.vocab_size;
    BackendOptions options;
    options.weight_precision = WeightPrecision::kFp32;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    std::unique_ptr<Backend> cpu = MakeCpu(model);
    ASSERT_NE(gpu, nullptr);
    const std::vector<int32_t> prompt = RandomTokens(200, vocab, 8);
    const SlotId c = Allocate(*cpu);
    const SlotId g = Allocate(*gpu);
    for (const bool from_cpu : {true, false}) {
      SCOPED_TRACE(from_cpu ? "cpu to gpu" : "gpu to cpu");
      Backend& source = from_cpu ? static_cast<Backend&>(*cpu) : *gpu;
      Backend& target = from_cpu ? static_cast<Backend&>(*gpu) : *cpu;
      const SlotId s = from_cpu ? c : g;
      const SlotId t = from_cpu ? g : c;
      ASSERT_TRUE(source.ResetSlot(s).ok());
      ASSERT_TRUE(source.Prefill(s, prompt, {}).ok());
      StateBlob blob = Read(source, s);
      for (int64_t position : {int64_t{200}, int64_t{300000}}) {
        SCOPED_TRACE(position);
        blob.position = position;
        ASSERT_TRUE(source.WriteSlot(s, blob).ok());
        ASSERT_TRUE(target.WriteSlot(t, blob).ok());
        EXPECT_EQ(Read(target, t).state, blob.state);
        for (TokenId token : RandomTokens(10, vocab, 9)) {
          std::vector<float> lc(vocab), lg(vocab);
          const DecodeItem ic{c, token}, ig{g, token};
          ASSERT_TRUE(cpu->Decode({&ic, 1}, absl::MakeSpan(lc)).ok());
          ASSERT_TRUE(gpu->Decode({&ig, 1}, absl::MakeSpan(lg)).ok());
          EXPECT_LE(RelativeError(lg, lc), 1e-4);
        }
        EXPECT_EQ(*gpu->SlotPosition(g), position + 10);
        EXPECT_LE(RelativeError(Read(*gpu, g).state, Read(*cpu, c).state), 1e-4);
      }
    }
  }
}

TEST(CudaBackendTest, SlotPoolCopyResetAndCapacity) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 20);
  const int64_t slot_bytes = model.config.StateFloatsPerSlot() * 4;
  BackendOptions options;
  options.state_memory_budget_bytes = slot_bytes * 5 + 7;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->slot_capacity(), 5);
  EXPECT_EQ(gpu->memory_use().state_pool_bytes, slot_bytes * 5);
  std::vector<SlotId> slots;
  for (int i = 0; i < 5; ++i) slots.push_back(Allocate(*gpu));
  EXPECT_EQ(slots[0].value, 0);  // lowest ids first
  EXPECT_EQ(gpu->free_slots(), 0);
  const absl::StatusOr<SlotId> full = gpu->AllocateSlot();
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("state_memory_budget_bytes"));

  ASSERT_TRUE(gpu->Prefill(slots[0], RandomTokens(30, model.config.vocab_size, 10), {}).ok());
  ASSERT_TRUE(gpu->CopySlot(slots[0], slots[1]).ok());
  const StateBlob a = Read(*gpu, slots[0]);
  const StateBlob b = Read(*gpu, slots[1]);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(b.position, 30);
  EXPECT_NE(std::count(a.state.begin(), a.state.end(), 0.0f),
            static_cast<std::ptrdiff_t>(a.state.size()));
  ASSERT_TRUE(gpu->ResetSlot(slots[1]).ok());
  const StateBlob reset = Read(*gpu, slots[1]);
  EXPECT_EQ(reset.position, 0);
  EXPECT_EQ(std::count(reset.state.begin(), reset.state.end(), 0.0f),
            static_cast<std::ptrdiff_t>(reset.state.size()));
  // A freed and reallocated slot comes back zeroed.
  gpu->FreeSlot(slots[0]);
  const SlotId again = Allocate(*gpu);
  EXPECT_EQ(again, slots[0]);
  const StateBlob fresh = Read(*gpu, again);
  EXPECT_EQ(fresh.position, 0);
  EXPECT_EQ(std::count(fresh.state.begin(), fresh.state.end(), 0.0f),
            static_cast<std::ptrdiff_t>(fresh.state.size()));
}

// --state_precision=bf16 against the fp32 state, on every variant whose mixers are all linear
// attention (the plain maps and Taylor's), fp32 weights so that the state is the only
// difference: the same 150-token prompt, then 64 decode steps of the same tokens. Every step
// rounds each S and z element once to bf16 (relative 2^-9), and the differences reach upper
// layers through the lower layers' outputs. Measured under the emulation, worst over the steps
// and variants: logits 1.9e-2 (rms_gated_gelu_nobias; 0.6e-2 to 1.3e-2 for the others), the
// exported state 5.6e-2 (pre_elu_wide_heads); the bounds, 3e-2 and 1e-1, leave about 1.6× of
// that for other hosts' summation orders, while a lost update or a misplaced element is an error
// of order 1. The prompt's own logits agree to 1e-4: its chunks carry the state in fp32.
TEST(CudaBackendTest, Bf16StateStaysWithinItsBoundOfTheFp32State) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr double kBound = 3e-2;       // logits
  constexpr double kStateBound = 1e-1;  // the exported state
  const int kPrompt = 150;
  const int kSteps = 64;
  int variants = 0;
  for (const Variant& variant : ModelVariants()) {
    if (!CheckCudaStatePrecision(StatePrecision::kBf16, variant.config).ok()) continue;
    ++variants;
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 23);
    const int64_t vocab = model.config.vocab_size;
    BackendOptions options;
    options.weight_precision = WeightPrecision::kFp32;
    std::unique_ptr<CudaBackend> fp32 = MakeCuda(model, options);
    options.state_precision = StatePrecision::kBf16;
    std::unique_ptr<CudaBackend> bf16 = MakeCuda(model, options);
    ASSERT_NE(fp32, nullptr);
    ASSERT_NE(bf16, nullptr);
    const SlotId a = Allocate(*fp32);
    const SlotId b = Allocate(*bf16);
    const std::vector<int32_t> prompt = RandomTokens(kPrompt, vocab, 24);
    std::vector<float> la(kPrompt * vocab), lb(kPrompt * vocab);
    ASSERT_TRUE(fp32->Prefill(a, prompt, absl::MakeSpan(la)).ok());
    ASSERT_TRUE(bf16->Prefill(b, prompt, absl::MakeSpan(lb)).ok());
    // Within the prompt the bf16 backend reads only the zero start state: linear attention's
    // chunks and the short convolution's taps inside the prompt carry it in fp32, so their logits
    // are the fp32 state's up to summation order. Mamba-2's prefill runs its scan per token and
    // stores (rounds) the state after each, as decoding does: it gets the decode bound.
    const bool rounds_per_token =
        std::any_of(variant.config.layers.begin(), variant.config.layers.end(),
                    [](const LayerSpec& layer) { return layer.mixer.kind == "mamba2"; });
    EXPECT_LE(RelativeError(lb, la), rounds_per_token ? kBound : 1e-4) << "prefill";
    double worst = 0.0;
    la.resize(vocab);
    lb.resize(vocab);
    for (TokenId token : RandomTokens(kSteps, vocab, 25)) {
      const DecodeItem ia{a, token}, ib{b, token};
      ASSERT_TRUE(fp32->Decode({&ia, 1}, absl::MakeSpan(la)).ok());
      ASSERT_TRUE(bf16->Decode({&ib, 1}, absl::MakeSpan(lb)).ok());
      worst = std::max(worst, RelativeError(lb, la));
    }
    EXPECT_LE(worst, kBound);
    EXPECT_GT(worst, 0.0);  // the state really is stored in bf16
    const StateBlob got = Read(*bf16, b);
    ASSERT_EQ(got.state.size(), static_cast<size_t>(model.config.StateFloatsPerSlot()));
    EXPECT_EQ(got.position, kPrompt + kSteps);
    const double state_error = RelativeError(got.state, Read(*fp32, a).state);
    EXPECT_LE(state_error, kStateBound);
  }
  EXPECT_GE(variants, 8);
}

// A bf16 pool holds twice the slots of an fp32 one in the same budget; its slots cross
// ReadSlot / WriteSlot as fp32 (import rounds each value to bf16 once, export widens exactly),
// and fork and reset act on the bf16 elements.
TEST(CudaBackendTest, Bf16StateConvertsAtTheSlotBoundary) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 26);
  const int64_t floats = model.config.StateFloatsPerSlot();
  BackendOptions options;
  options.state_precision = StatePrecision::kBf16;
  options.state_memory_budget_bytes = floats * 4 * 3;  // 3 fp32 slots, 6 bf16 ones
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->slot_capacity(), 6);
  EXPECT_EQ(gpu->memory_use().state_pool_bytes, floats * 2 * 6);

  std::unique_ptr<Backend> cpu = MakeCpu(model);
  const SlotId c = Allocate(*cpu);
  ASSERT_TRUE(cpu->Prefill(c, RandomTokens(40, model.config.vocab_size, 27), {}).ok());
  const StateBlob blob = Read(*cpu, c);
  const SlotId g = Allocate(*gpu);
  ASSERT_TRUE(gpu->WriteSlot(g, blob).ok());
  const StateBlob back = Read(*gpu, g);
  EXPECT_EQ(back.position, blob.position);
  ASSERT_EQ(back.state.size(), blob.state.size());
  for (size_t i = 0; i < blob.state.size(); ++i) {
    ASSERT_EQ(back.state[i], gpu_test::RoundBf16(blob.state[i])) << i;
  }
  // A value already in bf16 goes out and back in unchanged.
  ASSERT_TRUE(gpu->WriteSlot(g, back).ok());
  EXPECT_EQ(Read(*gpu, g).state, back.state);

  const SlotId fork = Allocate(*gpu);
  ASSERT_TRUE(gpu->CopySlot(g, fork).ok());
  EXPECT_EQ(Read(*gpu, fork).state, back.state);
  ASSERT_TRUE(gpu->ResetSlot(fork).ok());
  const StateBlob reset = Read(*gpu, fork);
  EXPECT_EQ(std::count(reset.state.begin(), reset.state.end(), 0.0f),
            static_cast<std::ptrdiff_t>(reset.state.size()));
}

// bf16 state is for the kinds whose bound holds (MixerKind::bf16_state: linear attention, Taylor,
// short_conv, mamba2): a model with another stateful kind is refused naming the flag, the layer
// and its kind, before any device is touched.
TEST(CudaBackendTest, Bf16StateIsRefusedForOtherMixers) {
  for (const Variant& variant : ModelVariants()) {
    if (variant.name != "based_mixed" && variant.name != "window4_layer_norm_ffn" &&
        variant.name != "gated_delta_net_wide_head" && variant.name != "gla_fla_block") {
      continue;
    }
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 28);
    BackendOptions options;
    options.state_precision = StatePrecision::kBf16;
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("state_precision bf16: layer "));
    EXPECT_THAT(std::string(b.status().message()),
                testing::AnyOf(HasSubstr("short_conv"), HasSubstr("sliding_window_attention"),
                               HasSubstr("gated_delta_net"), HasSubstr("gated_linear_attention")));
  }
}

// int8 is a CPU format: refused before any device is touched (so also where there is none).
TEST(CudaBackendTest, Int8WeightsAreRefusedNamingWhatCudaRuns) {
  const Model model = MakeRandomModel(TinyConfig(), 3);
  BackendOptions options;
  options.weight_precision = WeightPrecision::kInt8;
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("weight_precision int8: the CUDA backend runs bf16, fp16 or fp32"));
}

// Issue 28: a model file stored int8 (config.json weight_format int8) is refused whatever
// --weight_precision says, before any device is looked for.
TEST(CudaBackendTest, Int8FileFormatIsRefused) {
  Model model = MakeRandomModel(TinyConfig(), 3);
  model.config.weight_format = WeightFileFormat::kInt8;
  for (WeightPrecision p : {WeightPrecision::kAuto, WeightPrecision::kFp32}) {
    BackendOptions options;
    options.weight_precision = p;
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(b.status().message()),
                HasSubstr("the CUDA backend does not read int8-stored weights"));
  }
}

// The upload places exactly the tensors the kinds' CudaTensorsOf groups name: a layer tensor in
// no group (a kind that left one out) or a group held in part is an error naming the tensor,
// never a silent skip.
TEST(CudaBackendTest, TheUploadRefusesATensorOutsideItsKindsDeviceGroups) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  Model extra = MakeRandomModel(TinyConfig(), 3);
  extra.weights.layers[1].tensors["attn.extra"] = extra.weights.layers[1].At("attn.o_proj.bias");
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(extra, BackendOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("layer 1: tensor \"attn.extra\" is in no device group"));

  Model half = MakeRandomModel(TinyConfig(), 3);
  half.weights.layers[0].tensors.erase("attn.k_proj.bias");
  b = CreateCudaBackend(half, BackendOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("layer 0 lacks \"attn.k_proj.bias\" of its device group \"qkv_bias\""));
}

TEST(CudaBackendTest, OutOfMemoryAtStartIsAClearError) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig config = TinyConfig();
  config.d_model = 512;
  config.n_heads = 8;
  config.head_dim = 64;
  config.feature_dim = 64;
  config.n_layers = 16;  // 2 MiB of state per slot
  const Model model = MakeRandomModel(config, 21);
  BackendOptions options;
  options.state_memory_budget_bytes = int64_t{4} << 40;  // 4 TiB
  options.max_slots = 1 << 20;
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("state_memory_budget_bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("free"));
  // The device is still usable afterwards.
  options.state_memory_budget_bytes = int64_t{1} << 30;
  EXPECT_TRUE(CreateCudaBackend(model, options).ok());
}

// The same inputs are rejected with the same codes as the CPU backend.
TEST(CudaBackendTest, BadInputsAreRejectedLikeTheCpuBackend) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig config = TinyConfig();
  config.position = PositionEmbedding::kLearned;
  config.max_position = 16;
  const Model model = MakeRandomModel(config, 22);
  BackendOptions options;
  options.max_batch_size = 4;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
  std::unique_ptr<Backend> cpu = MakeCpu(model, options);
  ASSERT_NE(gpu, nullptr);
  for (Backend* b : {static_cast<Backend*>(gpu.get()), cpu.get()}) {
    SCOPED_TRACE(b->device() == DeviceKind::kCuda ? "cuda" : "cpu");
    const SlotId s = Allocate(*b);
    const SlotId t = Allocate(*b);
    const int64_t vocab = config.vocab_size;
    std::vector<float> one(vocab), two(2 * vocab), odd(vocab + 1);
    auto code = [](const absl::Status& status) { return status.code(); };
    using absl::StatusCode;
    EXPECT_EQ(code(b->Prefill(s, {}, {})), StatusCode::kInvalidArgument);
    EXPECT_EQ(code(b->Prefill(s, std::vector<TokenId>{1, 2}, absl::MakeSpan(odd))),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(code(b->Prefill(s, std::vector<TokenId>{1, static_cast<TokenId>(vocab)}, {})),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(code(b->Prefill(SlotId{999}, std::vector<TokenId>{1}, {})),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(code(b->Prefill(s, RandomTokens(17, vocab, 1), {})), StatusCode::kOutOfRange);
    EXPECT_EQ(code(b->Decode({}, {})), StatusCode::kInvalidArgument);
    const DecodeItem dup[] = {{s, 1}, {s, 2}};
    EXPECT_EQ(code(b->Decode(dup, absl::MakeSpan(two))), StatusCode::kInvalidArgument);
    const DecodeItem pair[] = {{s, 1}, {t, 2}};
    EXPECT_EQ(code(b->Decode(pair, absl::MakeSpan(one))), StatusCode::kInvalidArgument);
    const DecodeItem bad_token[] = {{s, -1}};
    EXPECT_EQ(code(b->Decode(bad_token, absl::MakeSpan(one))), StatusCode::kInvalidArgument);
    const DecodeItem five[] = {{s, 1}, {t, 1}, {s, 1}, {t, 1}, {s, 1}};
    std::vector<float> five_logits(5 * vocab);
    EXPECT_EQ(code(b->Decode(five, absl::MakeSpan(five_logits))), StatusCode::kInvalidArgument);
    EXPECT_EQ(code(b->CopySlot(s, s)), StatusCode::kInvalidArgument);
    StateBlob blob;
    blob.state.resize(3);
    EXPECT_EQ(code(b->WriteSlot(s, blob)), StatusCode::kInvalidArgument);
    blob.state.resize(static_cast<size_t>(config.StateFloatsPerSlot()));
    blob.position = 17;
    EXPECT_EQ(code(b->WriteSlot(s, blob)), StatusCode::kOutOfRange);
    blob.position = 16;
    EXPECT_TRUE(b->WriteSlot(s, blob).ok());
    const DecodeItem past[] = {{s, 1}};
    EXPECT_EQ(code(b->Decode(past, absl::MakeSpan(one))), StatusCode::kOutOfRange);
    b->FreeSlot(t);
    EXPECT_EQ(code(b->ResetSlot(t)), StatusCode::kInvalidArgument);
    b->FreeSlot(t);  // freeing twice is a no-op
  }
}

}  // namespace
}  // namespace linserve

namespace linserve {
namespace {

// PrefillAndSample picks from the prompt's last logits as the host Sampler does, and the rows
// that ask for top_logprobs get LogProbOf / TopLogprobs of those logits; the seen counts that
// SetSeenCounts loads into another slot make it continue exactly as the slot they came from.
TEST(CudaBackendTest, PrefillAndSampleLogprobsAndSeenCountsFollowTheContract) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  ModelConfig config = TinyConfig();
  config.tie_embeddings = false;
  const Model model = MakeRandomModel(config, 19);
  const int vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  const std::vector<int32_t> prompt = RandomTokens(17, vocab, 8);
  SamplingParams params;
  params.seed = 5;
  params.temperature = 0.8f;
  params.repetition_penalty = 1.5f;
  params.frequency_penalty = 0.5f;

  const SlotId reference = Allocate(*gpu);
  std::vector<float> logits(vocab);
  ASSERT_TRUE(gpu->Prefill(reference, prompt, absl::MakeSpan(logits)).ok());
  Sampler sampler(params);
  sampler.Observe(prompt);
  const TokenId expected = sampler.Sample(logits);

  const SlotId a = Allocate(*gpu);
  ASSERT_TRUE(gpu->StartSampling(a, params, /*top_logprobs=*/4, prompt).ok());
  TokenId token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top(kMaxTopLogprobs);
  ASSERT_TRUE(
      gpu->PrefillAndSample(a, prompt, {{&token, 1}, {&logprob, 1}, absl::MakeSpan(top)}, nullptr)
          .ok());
  EXPECT_EQ(token, expected);
  EXPECT_FLOAT_EQ(logprob, LogProbOf(logits, token));
  const std::vector<TokenLogprob> host_top = TopLogprobs(logits, 4);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(top[k].token, host_top[k].token) << k;
    EXPECT_FLOAT_EQ(top[k].logprob, host_top[k].logprob) << k;
  }

  // A few steps, then slot b takes a's state and counts and both continue alike.
  std::vector<TokenId> history = prompt;
  history.push_back(token);
  for (int i = 0; i < 8; ++i) {
    const DecodeItem item{a, history.back()};
    ASSERT_TRUE(gpu->DecodeAndSample({&item, 1}, {{&token, 1}, {&logprob, 1}, absl::MakeSpan(top)})
                    .ok());
    history.push_back(token);
  }
  StateBlob blob;
  ASSERT_TRUE(gpu->ReadSlot(a, blob).ok());
  const SlotId b = Allocate(*gpu);
  ASSERT_TRUE(gpu->WriteSlot(b, blob).ok());
  std::map<TokenId, int64_t> counted;
  for (TokenId t : history) ++counted[t];
  std::vector<TokenCount> counts;
  for (const auto& [t, c] : counted) counts.push_back({t, c});
  ASSERT_TRUE(gpu->SetSeenCounts(b, counts).ok());
  params.seed = 6;
  ASSERT_TRUE(gpu->StartSampling(a, params, 0, {}).ok());
  ASSERT_TRUE(gpu->StartSampling(b, params, 0, {}).ok());
  TokenId ta = history.back(), tb = history.back();
  for (int i = 0; i < 20; ++i) {
    const DecodeItem batch[] = {{a, ta}, {b, tb}};
    TokenId out[2];
    ASSERT_TRUE(gpu->DecodeAndSample(batch, {.tokens = out}).ok());
    ASSERT_EQ(out[0], out[1]) << "step " << i;
    ta = out[0];
    tb = out[1];
  }
}

// A launched step gives what DecodeAndSample gives (tokens, logprobs, alternatives), and the
// calls made while it is in flight see the slot as the step leaves it without disturbing the
// step's results, even a PrefillAndSample that samples through the same pinned buffers.
TEST(CudaBackendTest, LaunchedStepsEqualDecodeAndSampleWhateverRunsWhileInFlight) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 23);
  const int vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> gpu = MakeCuda(model);
  ASSERT_NE(gpu, nullptr);
  EXPECT_TRUE(gpu->asynchronous());
  const std::vector<int32_t> prompt = RandomTokens(9, vocab, 3);
  SamplingParams params;
  params.seed = 11;
  params.temperature = 0.9f;
  params.top_k = 20;
  params.presence_penalty = 0.3f;

  struct Pick {
    TokenId token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top = std::vector<TokenLogprob>(kMaxTopLogprobs);
    SampleOutput Output() { return {{&token, 1}, {&logprob, 1}, absl::MakeSpan(top)}; }
  };
  const SlotId a = Allocate(*gpu), b = Allocate(*gpu), c = Allocate(*gpu);
  Pick pa, pb, pc;
  for (SlotId s : {a, b}) {
    ASSERT_TRUE(gpu->StartSampling(s, params, /*top_logprobs=*/3, prompt).ok());
  }
  ASSERT_TRUE(gpu->PrefillAndSample(a, prompt, pa.Output(), nullptr).ok());
  ASSERT_TRUE(gpu->PrefillAndSample(b, prompt, pb.Output(), nullptr).ok());
  ASSERT_EQ(pa.token, pb.token);
  ASSERT_TRUE(gpu->StartSampling(c, params, /*top_logprobs=*/2, {}).ok());

  EXPECT_EQ(gpu->CollectSamples().code(), absl::StatusCode::kFailedPrecondition);
  for (int step = 0; step < 10; ++step) {
    const DecodeItem item_a{a, pa.token}, item_b{b, pb.token};
    ASSERT_TRUE(gpu->DecodeAndSample({&item_a, 1}, pa.Output()).ok());
    ASSERT_TRUE(gpu->LaunchDecodeAndSample({&item_b, 1}, pb.Output()).ok());
    const StateBlob state_a = Read(*gpu, a), state_b = Read(*gpu, b);
    EXPECT_EQ(state_b.position, state_a.position) << "step " << step;
    EXPECT_EQ(state_b.state, state_a.state) << "step " << step;
    ASSERT_TRUE(gpu->PrefillAndSample(c, {&pa.token, 1}, pc.Output(), nullptr).ok());
    ASSERT_TRUE(gpu->CollectSamples().ok());
    ASSERT_EQ(pb.token, pa.token) << "step " << step;
    EXPECT_EQ(pb.logprob, pa.logprob) << "step " << step;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(pb.top[k].token, pa.top[k].token) << "step " << step << " k " << k;
      EXPECT_EQ(pb.top[k].logprob, pa.top[k].logprob) << "step " << step << " k " << k;
    }
  }
  EXPECT_EQ(gpu->CollectSamples().code(), absl::StatusCode::kFailedPrecondition);
}

// Launch-ahead: step N+1 launched before step N is collected, its rows feeding step N's picks
// on the device (DecodeItem::previous_row), gives exactly the tokens, logprobs and states of
// DecodeAndSample fed on the host, greedy and sampled rows alike and with the rows in another
// order than the step before; a third launch, a previous row that names no row of the step in
// flight or another slot's, and a previous row outside a launch are refused; admitting a request
// (a slot, a sampler start without a penalty) while two steps are in flight waits for neither
// (asserted under the emulation, which counts the host's waits).
TEST(CudaBackendTest, LaunchAheadFeedsThePicksOfTheStepInFlight) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 29);
  const int vocab = model.config.vocab_size;
  std::unique_ptr<CudaBackend> ahead = MakeCuda(model);
  std::unique_ptr<CudaBackend> host_fed = MakeCuda(model);
  ASSERT_NE(ahead, nullptr);
  ASSERT_NE(host_fed, nullptr);
  EXPECT_EQ(ahead->max_steps_in_flight(), 2);
  constexpr int kRows = 3;
  constexpr int kSteps = 8;
  const std::vector<int32_t> prompt = RandomTokens(7, vocab, 5);
  std::vector<SlotId> slots_a, slots_h;
  std::vector<TokenId> first(kRows);
  for (int r = 0; r < kRows; ++r) {
    SamplingParams params;
    params.seed = 100 + static_cast<uint64_t>(r);
    params.temperature = r == 0 ? 0.0f : 0.8f;  // one greedy row
    params.top_k = r == 2 ? 10 : 0;
    for (CudaBackend* gpu : {ahead.get(), host_fed.get()}) {
      const SlotId slot = Allocate(*gpu);
      ASSERT_TRUE(gpu->StartSampling(slot, params, /*top_logprobs=*/2, prompt).ok());
      TokenId token = -1;
      float logprob = 0;
      std::vector<TokenLogprob> top(kMaxTopLogprobs);
      ASSERT_TRUE(gpu->PrefillAndSample(slot, prompt,
                                        {.tokens = {&token, 1},
                                         .logprobs = {&logprob, 1},
                                         .top_logprobs = absl::MakeSpan(top)},
                                        nullptr)
                      .ok());
      (gpu == ahead.get() ? slots_a : slots_h).push_back(slot);
      first[r] = token;
    }
  }

  // The host-fed reference: one DecodeAndSample a step, rows in slot order.
  std::vector<std::vector<TokenId>> expected(kSteps, std::vector<TokenId>(kRows));
  std::vector<std::vector<float>> expected_logprobs(kSteps, std::vector<float>(kRows));
  std::vector<TokenId> feed = first;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<DecodeItem> batch;
    for (int r = 0; r < kRows; ++r) batch.push_back({.slot = slots_h[r], .token = feed[r]});
    std::vector<TokenLogprob> top(kRows * kMaxTopLogprobs);
    ASSERT_TRUE(host_fed
                    ->DecodeAndSample(batch, {.tokens = absl::MakeSpan(expected[step]),
                                              .logprobs = absl::MakeSpan(expected_logprobs[step]),
                                              .top_logprobs = absl::MakeSpan(top)})
                    .ok());
    feed = expected[step];
  }

  // Launch-ahead: step 0 fed on the host, every later step from the one in flight, whose rows
  // are reversed each step.
  struct Out {
    std::vector<TokenId> tokens = std::vector<TokenId>(kRows);
    std::vector<float> logprobs = std::vector<float>(kRows);
    std::vector<TokenLogprob> top = std::vector<TokenLogprob>(kRows * kMaxTopLogprobs);
    SampleOutput Output() {
      return {absl::MakeSpan(tokens), absl::MakeSpan(logprobs), absl::MakeSpan(top)};
    }
  };
  std::vector<Out> outs(kSteps);
  std::vector<std::vector<int>> order(kSteps);  // order[step][i]: the row index r of batch row i
  for (int step = 0; step < kSteps; ++step) {
    std::vector<DecodeItem> batch;
    for (int i = 0; i < kRows; ++i) {
      const int r = step % 2 == 0 ? i : kRows - 1 - i;
      order[step].push_back(r);
      DecodeItem item{.slot = slots_a[r]};
      if (step == 0) {
        item.token = first[r];
      } else {
        // The row of the same slot in the step in flight.
        const auto at = std::find(order[step - 1].begin(), order[step - 1].end(), r);
        item.previous_row = static_cast<int32_t>(at - order[step - 1].begin());
      }
      batch.push_back(item);
    }
    if (step == 2) {
      // Refusals while one step is in flight, each leaving everything as it was.
      std::vector<DecodeItem> wrong = batch;
      wrong[0].previous_row = kRows;
      EXPECT_EQ(ahead->LaunchDecodeAndSample(wrong, outs[step].Output()).code(),
                absl::StatusCode::kInvalidArgument);
      wrong = batch;
      std::swap(wrong[0].previous_row, wrong[1].previous_row);
      EXPECT_EQ(ahead->LaunchDecodeAndSample(wrong, outs[step].Output()).code(),
                absl::StatusCode::kInvalidArgument);
    }
    ASSERT_TRUE(ahead->LaunchDecodeAndSample(batch, outs[step].Output()).ok()) << "step " << step;
    if (step == 1) {
      EXPECT_EQ(ahead->LaunchDecodeAndSample(batch, outs[step].Output()).code(),
                absl::StatusCode::kFailedPrecondition);  // a third step in flight
      EXPECT_EQ(ahead->DecodeAndSample(batch, outs[step].Output()).code(),
                absl::StatusCode::kInvalidArgument);  // previous rows outside a launch
      // Admitting requests while two steps are in flight waits for neither: a slot, a sampler
      // start without a penalty, one with a penalty (its prompt counted through the sampler's
      // arena) and a resumed session's counts are all enqueued behind them.
      const int64_t waits = HostWaits();
      SamplingParams fresh;
      fresh.seed = 3;
      absl::StatusOr<SlotId> admitted = ahead->AllocateSlot();
      ASSERT_TRUE(admitted.ok()) << admitted.status();
      ASSERT_TRUE(ahead->StartSampling(*admitted, fresh, 0, prompt).ok());
      SamplingParams penalised = fresh;
      penalised.repetition_penalty = 1.2f;
      absl::StatusOr<SlotId> resumed = ahead->AllocateSlot();
      ASSERT_TRUE(resumed.ok()) << resumed.status();
      ASSERT_TRUE(ahead->StartSampling(*resumed, penalised, 0, prompt).ok());
      const std::vector<TokenCount> counts = {{5, 2}, {7, 1}};
      ASSERT_TRUE(ahead->SetSeenCounts(*resumed, counts).ok());
      if (waits >= 0) {
        EXPECT_EQ(HostWaits(), waits);
      }
      ahead->FreeSlot(*admitted);
      ahead->FreeSlot(*resumed);
    }
    if (step > 0) {
      ASSERT_TRUE(ahead->CollectSamples().ok()) << "step " << step - 1;
    }
  }
  ASSERT_TRUE(ahead->CollectSamples().ok());
  EXPECT_EQ(ahead->CollectSamples().code(), absl::StatusCode::kFailedPrecondition);

  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kRows; ++i) {
      const int r = order[step][i];
      EXPECT_EQ(outs[step].tokens[i], expected[step][r]) << "step " << step << " row " << r;
      EXPECT_EQ(outs[step].logprobs[i], expected_logprobs[step][r])
          << "step " << step << " row " << r;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const StateBlob a = Read(*ahead, slots_a[r]), h = Read(*host_fed, slots_h[r]);
    EXPECT_EQ(a.position, h.position) << "row " << r;
    EXPECT_EQ(a.state, h.state) << "row " << r;
  }
}

// A decode step with sampling is one graph launch (part 2 of the GPU serving issue): the
// sampler (argmax, draw, masks, penalties, logprobs) and the copies of its picks to pinned
// memory are captured with the layers, per sampling variant and bucket; only a masked row's
// mask travels in a copy of its own before the launch. The picks and logprobs are bitwise
// those of the backend without graphs, whatever mix of rows a step holds (padding rows pick
// nothing). The enqueue counts are asserted under the emulation, the picks everywhere.
TEST(CudaBackendTest, ASampledDecodeStepIsOneGraphLaunch) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 41);
  const int64_t vocab = model.config.vocab_size;
  BackendOptions options;
  options.max_batch_size = 8;
  CudaBackendOptions eager_options;
  eager_options.use_cuda_graphs = false;
  std::unique_ptr<CudaBackend> graphs = MakeCuda(model, options);
  std::unique_ptr<CudaBackend> eager = MakeCuda(model, options, eager_options);
  ASSERT_NE(graphs, nullptr);
  ASSERT_NE(eager, nullptr);
  constexpr int kRows = 5;
  std::vector<SamplingParams> settings(kRows);
  settings[0].temperature = 0.0f;
  settings[1].temperature = 0.9f;
  settings[1].top_k = 12;
  settings[2].temperature = 0.7f;
  settings[2].top_p = 0.8f;
  settings[2].repetition_penalty = 1.4f;
  settings[2].frequency_penalty = 0.5f;
  settings[3].temperature = 0.0f;
  settings[4].temperature = 1.1f;
  const std::vector<int32_t> top_logprobs = {0, 0, 2, 3, 0};
  const std::vector<uint32_t> mask = StridedMask(vocab, 1, 3);
  const std::vector<int32_t> prompt = RandomTokens(9, vocab, 41);
  std::vector<SlotId> slots_g, slots_e;
  std::vector<TokenId> feed(kRows, prompt.back());
  for (int r = 0; r < kRows; ++r) {
    settings[r].seed = 70 + static_cast<uint64_t>(r);
    for (CudaBackend* gpu : {graphs.get(), eager.get()}) {
      const SlotId slot = Allocate(*gpu);
      ASSERT_TRUE(gpu->Prefill(slot, prompt, {}).ok());
      ASSERT_TRUE(gpu->StartSampling(slot, settings[r], top_logprobs[r], prompt).ok());
      (gpu == graphs.get() ? slots_g : slots_e).push_back(slot);
    }
  }
  // Each set of rows three times: the first captures its (variant, bucket), the others replay.
  const std::vector<std::vector<int>> steps = {{0}, {1}, {0, 1}, {2}, {3, 1}, {4}, {0, 1, 2, 3, 4}};
  for (size_t k = 0; k < steps.size(); ++k) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      const std::vector<int>& rows = steps[k];
      const size_t n = rows.size();
      std::vector<DecodeItem> batch_g, batch_e;
      bool masked = false;
      for (int r : rows) {
        const uint32_t* allowed = r == 4 ? mask.data() : nullptr;
        masked = masked || allowed != nullptr;
        batch_g.push_back({.slot = slots_g[r], .token = feed[r], .allowed_tokens = allowed});
        batch_e.push_back({.slot = slots_e[r], .token = feed[r], .allowed_tokens = allowed});
      }
      std::vector<TokenId> tokens_g(n), tokens_e(n);
      std::vector<float> logprobs_g(n), logprobs_e(n);
      std::vector<TokenLogprob> top_g(n * kMaxTopLogprobs), top_e(n * kMaxTopLogprobs);
      const int64_t enqueued = HostEnqueues();
      ASSERT_TRUE(graphs
                      ->LaunchDecodeAndSample(batch_g, {absl::MakeSpan(tokens_g),
                                                        absl::MakeSpan(logprobs_g),
                                                        absl::MakeSpan(top_g)})
                      .ok());
      if (repeat > 0 && enqueued >= 0) {
        EXPECT_EQ(HostEnqueues() - enqueued, masked ? 2 : 1) << "step " << k;
      }
      ASSERT_TRUE(graphs->CollectSamples().ok());
      ASSERT_TRUE(eager
                      ->DecodeAndSample(batch_e, {absl::MakeSpan(tokens_e),
                                                  absl::MakeSpan(logprobs_e),
                                                  absl::MakeSpan(top_e)})
                      .ok());
      for (size_t i = 0; i < n; ++i) {
        const int r = rows[i];
        EXPECT_EQ(tokens_g[i], tokens_e[i]) << "step " << k << " row " << r;
        if (r == 4) {
          EXPECT_EQ(tokens_g[i] % 3, 1) << "the mask holds";
        }
        if (top_logprobs[r] == 0) continue;
        EXPECT_EQ(logprobs_g[i], logprobs_e[i]) << "step " << k << " row " << r;
        for (int t = 0; t < top_logprobs[r]; ++t) {
          const size_t at = i * kMaxTopLogprobs + static_cast<size_t>(t);
          EXPECT_EQ(top_g[at].token, top_e[at].token) << "step " << k << " row " << r;
          EXPECT_EQ(top_g[at].logprob, top_e[at].logprob) << "step " << k << " row " << r;
        }
      }
      for (size_t i = 0; i < n; ++i) feed[rows[i]] = tokens_g[i];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ(Read(*graphs, slots_g[r]).state, Read(*eager, slots_e[r]).state) << "row " << r;
  }
}

// Asynchronous reads (prefix checkpoints, turn boundaries): a read started while a decode step
// is in flight returns at once (no host wait, under the emulation), sees the slot as the step
// leaves it, and lands, in start order, equal to ReadSlot afterwards (fp32 and bf16 states,
// position included); more reads than the pinned buffers wait for the oldest; a slot not
// allocated is refused at the start.
TEST(CudaBackendTest, AsynchronousReadsLandAsReadSlotWithoutWaitingForTheStep) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 43);
  const int vocab = model.config.vocab_size;
  for (StatePrecision precision : {StatePrecision::kFp32, StatePrecision::kBf16}) {
    SCOPED_TRACE(precision == StatePrecision::kBf16 ? "bf16" : "fp32");
    BackendOptions options;
    options.state_precision = precision;
    std::unique_ptr<CudaBackend> gpu = MakeCuda(model, options);
    ASSERT_NE(gpu, nullptr);
    std::vector<SlotId> slots;
    std::vector<DecodeItem> batch;
    for (int i = 0; i < 3; ++i) {
      slots.push_back(Allocate(*gpu));
      ASSERT_TRUE(gpu->Prefill(slots[i], RandomTokens(5 + i, vocab, 60 + i), {}).ok());
      ASSERT_TRUE(gpu->StartSampling(slots[i], SamplingParams{}, 0, {}).ok());
      batch.push_back({.slot = slots[i], .token = 3});
    }
    std::vector<TokenId> tokens(3);
    ASSERT_TRUE(gpu->LaunchDecodeAndSample(batch, {.tokens = absl::MakeSpan(tokens)}).ok());
    const int64_t waits = HostWaits();
    std::vector<int64_t> tickets;
    for (int i = 0; i < 4; ++i) {  // as many as the pinned buffers
      absl::StatusOr<int64_t> ticket = gpu->StartReadSlot(slots[i % 3]);
      ASSERT_TRUE(ticket.ok()) << ticket.status();
      tickets.push_back(*ticket);
    }
    if (waits >= 0) {
      EXPECT_EQ(HostWaits(), waits) << "starting a read waited for the device";
    }
    // A fifth waits for the oldest, which lands then.
    absl::StatusOr<int64_t> fifth = gpu->StartReadSlot(slots[1]);
    ASSERT_TRUE(fifth.ok());
    tickets.push_back(*fifth);
    EXPECT_FALSE(gpu->StartReadSlot(SlotId{static_cast<int32_t>(gpu->slot_capacity() - 1)}).ok());
    ASSERT_TRUE(gpu->CollectSamples().ok());
    std::vector<Backend::SlotRead> landed = gpu->FinishedReads(/*wait=*/true);
    ASSERT_EQ(landed.size(), tickets.size());
    for (size_t i = 0; i < landed.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(landed[i].ticket, tickets[i]);
      ASSERT_TRUE(landed[i].state.ok()) << landed[i].state.status();
      const StateBlob now = Read(*gpu, slots[i == 4 ? 1 : i % 3]);
      EXPECT_EQ(landed[i].state->position, now.position);
      EXPECT_EQ(landed[i].state->state, now.state);
    }
    EXPECT_TRUE(gpu->FinishedReads(/*wait=*/true).empty());
  }
}

}  // namespace
}  // namespace linserve
