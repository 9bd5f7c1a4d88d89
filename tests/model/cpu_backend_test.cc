// CpuBackend: chunked prefill against the recurrence, batch invariance, slots, input validation.
#include "model/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// max|a − b| / max|b|: the error relative to the reference's largest magnitude.
double RelativeError(absl::Span<const float> a, absl::Span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<TokenId> RandomTokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

std::unique_ptr<Backend> MakeBackend(const Model& model, BackendOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

SlotId Allocate(Backend& b) {
  absl::StatusOr<SlotId> s = b.AllocateSlot();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : SlotId{};
}

// Feeds tokens one Decode call at a time; returns every step's logits.
std::vector<float> DecodeOneByOne(Backend& b, SlotId slot, absl::Span<const TokenId> tokens) {
  const int64_t vocab = b.config().vocab_size;
  std::vector<float> all(tokens.size() * vocab);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const DecodeItem item{slot, tokens[t]};
    EXPECT_TRUE(b.Decode({&item, 1}, absl::MakeSpan(all).subspan(t * vocab, vocab)).ok());
  }
  return all;
}

StateBlob Read(const Backend& b, SlotId slot) {
  StateBlob blob;
  EXPECT_TRUE(b.ReadSlot(slot, blob).ok());
  return blob;
}

struct Variant {
  std::string name;
  ModelConfig config;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  ModelConfig c = TinyConfig();  // pre-norm, elu_plus_one, sinusoidal, biases, tied
  v.push_back({"pre_elu_sinusoidal", c});
  c = TinyConfig();
  c.norm = NormPlacement::kPost;
  c.feature_map = FeatureMap::kExp;
  c.position = PositionEmbedding::kLearned;
  c.max_position = 512;
  c.activation = Activation::kRelu;
  v.push_back({"post_exp_learned", c});
  c = TinyConfig();
  c.feature_map = FeatureMap::kFavorPlus;
  c.feature_dim = 12;
  c.position = PositionEmbedding::kNone;
  c.activation = Activation::kGeluTanh;
  c.tie_embeddings = false;
  v.push_back({"pre_favor_none_untied", c});
  c = TinyConfig();
  c.norm = NormPlacement::kPost;
  c.feature_map = FeatureMap::kRelu;
  c.bias = false;
  v.push_back({"post_relu_nobias", c});
  return v;
}

// Prefill with chunk sizes 1, 7 and 64 leaves the state of feeding the tokens one by one
// (relative error <= 1e-5), and its every-position logits match the step-by-step ones.
TEST(CpuBackendTest, ChunkedPrefillEqualsRecurrence) {
  const int kTokens = 150;  // two full chunks of 64 and a ragged one
  for (const Variant& variant : Variants()) {
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 7);
    const int vocab = variant.config.vocab_size;
    const std::vector<TokenId> tokens = RandomTokens(kTokens, vocab, 1);

    std::unique_ptr<Backend> recurrent = MakeBackend(model);
    const SlotId r = Allocate(*recurrent);
    const std::vector<float> step_logits = DecodeOneByOne(*recurrent, r, tokens);
    const StateBlob expect = Read(*recurrent, r);
    ASSERT_EQ(expect.position, kTokens);

    for (int chunk : {1, 7, 64}) {
      SCOPED_TRACE(chunk);
      BackendOptions options;
      options.prefill_chunk_size = chunk;
      std::unique_ptr<Backend> chunked = MakeBackend(model, options);
      const SlotId s = Allocate(*chunked);
      std::vector<float> logits(static_cast<size_t>(kTokens) * vocab);
      ASSERT_TRUE(chunked->Prefill(s, tokens, absl::MakeSpan(logits)).ok());
      const StateBlob got = Read(*chunked, s);
      EXPECT_EQ(got.position, kTokens);
      EXPECT_LE(RelativeError(got.state, expect.state), 1e-5);
      EXPECT_LE(RelativeError(logits, step_logits), 1e-4);
      if (chunk == 1) {  // one-token chunks run the decode kernels: bitwise equal
        EXPECT_EQ(got.state, expect.state);
        EXPECT_EQ(logits, step_logits);
      }
    }
  }
}

TEST(CpuBackendTest, PrefillInPiecesContinuesWhereItStopped) {
  const Model model = MakeRandomModel(TinyConfig(), 3);
  const std::vector<TokenId> tokens = RandomTokens(100, 260, 2);
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId whole = Allocate(*b);
  const SlotId pieces = Allocate(*b);
  std::vector<float> last_whole(260), last_pieces(260);
  ASSERT_TRUE(b->Prefill(whole, tokens, absl::MakeSpan(last_whole)).ok());
  const absl::Span<const TokenId> all(tokens);
  ASSERT_TRUE(b->Prefill(pieces, all.subspan(0, 30), {}).ok());
  ASSERT_TRUE(b->Prefill(pieces, all.subspan(30), absl::MakeSpan(last_pieces)).ok());
  EXPECT_EQ(*b->SlotPosition(pieces), 100);
  EXPECT_LE(RelativeError(Read(*b, pieces).state, Read(*b, whole).state), 1e-5);
  EXPECT_LE(RelativeError(last_pieces, last_whole), 1e-4);
}

SamplingParams SeededParams(int i) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.seed = 77 + i;
  return p;
}

// A varlen batch: sessions at different positions, prompts from one token to hundreds, more
// tokens in all than a pass holds (CpuBackend::kPrefillPassRows), every other item sampling. Each
// session's state and sampled token are bitwise what it gets alone, and the state is the
// recurrence's up to rounding.
TEST(CpuBackendTest, PrefillBatchGivesBitwiseWhatEachSessionGetsAlone) {
  // 689 tokens in all: the batch takes two passes, and the 450-token item is cut between them.
  const std::vector<int> history = {0, 10, 63, 0, 40, 5, 0};
  const std::vector<int> lengths = {1, 5, 64, 130, 450, 2, 37};
  for (const Variant& variant : Variants()) {
    SCOPED_TRACE(variant.name);
    const Model model = MakeRandomModel(variant.config, 21);
    const int vocab = variant.config.vocab_size;
    for (int chunk : {7, 64}) {
      SCOPED_TRACE(chunk);
      BackendOptions options;
      options.prefill_chunk_size = chunk;
      std::unique_ptr<Backend> batched = MakeBackend(model, options);
      std::unique_ptr<Backend> alone = MakeBackend(model, options);
      std::unique_ptr<Backend> recurrent = MakeBackend(model, options);
      std::vector<std::vector<TokenId>> prompts;
      std::vector<PrefillItem> batch;
      std::vector<TokenId> expect_tokens;
      for (size_t i = 0; i < lengths.size(); ++i) {
        const std::vector<TokenId> before = RandomTokens(history[i], vocab, 300 + i);
        prompts.push_back(RandomTokens(lengths[i], vocab, 400 + i));
        const bool sample = i % 2 == 1;
        const SlotId slot = Allocate(*batched);
        const SlotId solo = Allocate(*alone);
        const SlotId steps = Allocate(*recurrent);
        ASSERT_EQ(slot, solo);
        for (Backend* b : {batched.get(), alone.get()}) {
          if (!before.empty()) {
            ASSERT_TRUE(b->Prefill(slot, before, {}).ok());
          }
          ASSERT_TRUE(b->StartSampling(slot, SeededParams(static_cast<int>(i)), 0, {}).ok());
        }
        DecodeOneByOne(*recurrent, steps, before);
        DecodeOneByOne(*recurrent, steps, prompts.back());
        batch.push_back({.slot = slot, .tokens = prompts.back(), .sample = sample});
        if (sample) {
          TokenId token = -1;
          ASSERT_TRUE(
              alone->PrefillAndSample(solo, prompts.back(), {.tokens = {&token, 1}}, nullptr).ok());
          expect_tokens.push_back(token);
        } else {
          ASSERT_TRUE(alone->Prefill(solo, prompts.back(), {}).ok());
        }
      }
      std::vector<TokenId> tokens(expect_tokens.size(), -1);
      ASSERT_TRUE(batched->PrefillBatch(batch, {.tokens = absl::MakeSpan(tokens)}).ok());
      EXPECT_EQ(tokens, expect_tokens);
      for (size_t i = 0; i < batch.size(); ++i) {
        SCOPED_TRACE(i);
        const StateBlob got = Read(*batched, batch[i].slot);
        EXPECT_EQ(got.position, history[i] + lengths[i]);
        EXPECT_EQ(got.state, Read(*alone, batch[i].slot).state);
        EXPECT_LE(RelativeError(got.state, Read(*recurrent, batch[i].slot).state), 1e-5);
      }
    }
  }
}

TEST(CpuBackendTest, PrefillBatchValidatesEveryItem) {
  const Model model = MakeRandomModel(TinyConfig(), 5);
  BackendOptions options;
  options.max_batch_size = 2;
  std::unique_ptr<Backend> b = MakeBackend(model, options);
  const SlotId a = Allocate(*b);
  const SlotId c = Allocate(*b);
  const SlotId unsampled = Allocate(*b);
  ASSERT_TRUE(b->StartSampling(a, {}, 0, {}).ok());
  ASSERT_TRUE(b->StartSampling(c, {}, 0, {}).ok());
  const std::vector<TokenId> ok = {1, 2, 3};
  const std::vector<TokenId> bad = {1, 260};
  TokenId token = 0;
  const SampleOutput one{.tokens = {&token, 1}};
  auto message = [&](std::vector<PrefillItem> batch, const SampleOutput& out) {
    const absl::Status s = b->PrefillBatch(batch, out);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  };
  EXPECT_THAT(message({}, {}), HasSubstr("batch is empty"));
  EXPECT_THAT(message({{a, ok}, {c, ok}, {unsampled, ok}}, {}),
              HasSubstr("3 items; max_batch_size is 2"));
  EXPECT_THAT(message({{a, ok}, {a, ok}}, {}), HasSubstr("batch[1].slot = 0 appears twice"));
  EXPECT_THAT(message({{a, ok}, {c, {}}}, {}), HasSubstr("batch[1].tokens is empty"));
  EXPECT_THAT(message({{a, ok}, {c, bad}}, {}), HasSubstr("batch[1].tokens[1] = 260"));
  EXPECT_THAT(message({{SlotId{9}, ok}}, {}), HasSubstr("batch[0].slot = 9"));
  EXPECT_THAT(message({{a, ok, true}}, {}), HasSubstr("out.tokens has 0 entries; expected 1"));
  EXPECT_EQ(b->PrefillBatch({{{unsampled, ok, true}}}, one).code(),
            absl::StatusCode::kFailedPrecondition);
  // Nothing was fed by the refused calls.
  EXPECT_EQ(*b->SlotPosition(a), 0);
  EXPECT_EQ(*b->SlotPosition(c), 0);
  EXPECT_TRUE(b->PrefillBatch({{a, ok, true}, {c, ok}}, one).ok());
  EXPECT_EQ(*b->SlotPosition(a), 3);
  EXPECT_EQ(*b->SlotPosition(c), 3);
}

TEST(CpuBackendTest, LastLogitsModeEqualsLastRowOfAllLogits) {
  const Model model = MakeRandomModel(TinyConfig(), 4);
  const std::vector<TokenId> tokens = RandomTokens(70, 260, 3);
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId a = Allocate(*b);
  const SlotId c = Allocate(*b);
  std::vector<float> all(70 * 260), last(260);
  ASSERT_TRUE(b->Prefill(a, tokens, absl::MakeSpan(all)).ok());
  ASSERT_TRUE(b->Prefill(c, tokens, absl::MakeSpan(last)).ok());
  EXPECT_EQ(std::vector<float>(all.end() - 260, all.end()), last);
}

// Bitwise: every batch row runs the same instruction sequence — Linear computes each output
// element with a fixed-order FMA chain whatever the number of rows and threads (no BLAS kernel
// choice by M), LayerNorm and φ are per row, attention per (slot, head) — so neither the batch's
// size, its other members nor a row's place in it can change a single bit.
TEST(CpuBackendTest, SessionInBatchOf64GivesBitwiseTheLogitsItGetsAlone) {
  const ModelConfig config = Variants()[2].config;  // favor_plus: the most arithmetic per row
  const Model model = MakeRandomModel(config, 11);
  const int vocab = config.vocab_size;
  std::unique_ptr<Backend> b = MakeBackend(model);
  std::vector<SlotId> slots;
  for (int i = 0; i < 64; ++i) {
    slots.push_back(Allocate(*b));
    ASSERT_TRUE(b->Prefill(slots.back(), RandomTokens(5 + i, vocab, 100 + i), {}).ok());
  }
  const SlotId target = slots[37];
  const SlotId alone = Allocate(*b);
  ASSERT_TRUE(b->CopySlot(target, alone).ok());

  std::mt19937_64 rng(5);
  for (int step = 0; step < 4; ++step) {
    std::vector<DecodeItem> batch;
    for (SlotId s : slots) batch.push_back({s, static_cast<TokenId>(rng() % vocab)});
    std::shuffle(batch.begin(), batch.end(), rng);
    const auto it = std::find_if(batch.begin(), batch.end(),
                                 [&](const DecodeItem& d) { return d.slot == target; });
    const size_t row = static_cast<size_t>(it - batch.begin());
    std::vector<float> batch_logits(batch.size() * vocab);
    ASSERT_TRUE(b->Decode(batch, absl::MakeSpan(batch_logits)).ok());
    std::vector<float> alone_logits(vocab);
    const DecodeItem single{alone, it->token};
    ASSERT_TRUE(b->Decode({&single, 1}, absl::MakeSpan(alone_logits)).ok());
    EXPECT_EQ(0, std::memcmp(alone_logits.data(), batch_logits.data() + row * vocab,
                             vocab * sizeof(float)))
        << "step " << step << ", row " << row;
  }
  EXPECT_EQ(Read(*b, target).state, Read(*b, alone).state);
}

// Sampling on top of batch-invariant logits: 64 sessions with their own seeds and parameters
// sample together; session 13, replayed alone, draws exactly the same tokens.
TEST(CpuBackendTest, SameSeedSameTokensAloneAndInBatchOf64) {
  // Untied: a tied random model mostly predicts its input token again.
  const Model model = MakeRandomModel(Variants()[2].config, 12);
  const int vocab = 260, steps = 24;
  auto params_for = [](int i) {
    SamplingParams p;
    p.temperature = 0.7f + 0.01f * i;
    p.top_k = i % 3 == 0 ? 0 : 40;
    p.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    p.min_p = 0.02f;
    p.repetition_penalty = 1.1f;
    p.seed = 1000 + i;
    return p;
  };
  auto prompt_for = [](int i) { return RandomTokens(3 + i % 9, 260, 500 + i); };

  std::unique_ptr<Backend> b = MakeBackend(model);
  std::vector<SlotId> slots;
  std::vector<Sampler> samplers;
  std::vector<TokenId> next;
  for (int i = 0; i < 64; ++i) {
    slots.push_back(Allocate(*b));
    std::vector<float> logits(vocab);
    const std::vector<TokenId> prompt = prompt_for(i);
    ASSERT_TRUE(b->Prefill(slots[i], prompt, absl::MakeSpan(logits)).ok());
    samplers.emplace_back(params_for(i));
    samplers[i].Observe(prompt);
    next.push_back(samplers[i].Sample(logits));
  }
  std::vector<TokenId> batched = {next[13]};
  for (int step = 1; step < steps; ++step) {
    std::vector<DecodeItem> batch;
    for (int i = 0; i < 64; ++i) batch.push_back({slots[i], next[i]});
    std::vector<float> logits(64 * vocab);
    ASSERT_TRUE(b->Decode(batch, absl::MakeSpan(logits)).ok());
    for (int i = 0; i < 64; ++i) {
      next[i] = samplers[i].Sample(absl::MakeSpan(logits).subspan(i * vocab, vocab));
    }
    batched.push_back(next[13]);
  }

  std::unique_ptr<Backend> solo = MakeBackend(model);
  const SlotId s = Allocate(*solo);
  Sampler sampler(params_for(13));
  std::vector<float> logits(vocab);
  const std::vector<TokenId> prompt = prompt_for(13);
  ASSERT_TRUE(solo->Prefill(s, prompt, absl::MakeSpan(logits)).ok());
  sampler.Observe(prompt);
  std::vector<TokenId> alone = {sampler.Sample(logits)};
  for (int step = 1; step < steps; ++step) {
    const DecodeItem item{s, alone.back()};
    ASSERT_TRUE(solo->Decode({&item, 1}, absl::MakeSpan(logits)).ok());
    alone.push_back(sampler.Sample(logits));
  }
  EXPECT_EQ(alone, batched);
  // The tokens are not all alike (the test would be vacuous with a degenerate model).
  EXPECT_GT(std::set<TokenId>(alone.begin(), alone.end()).size(), 3u);
}

// Large enough that every kernel really splits its work (see cpu::ThreadsForWork).
TEST(CpuBackendTest, ThreadCountDoesNotChangeResults) {
  ModelConfig config = Variants()[1].config;
  config.d_model = 128;
  config.head_dim = 32;
  config.feature_dim = 32;
  config.d_ff = 512;
  const Model model = MakeRandomModel(config, 13);
  const std::vector<TokenId> tokens = RandomTokens(90, 260, 6);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    BackendOptions options;
    options.num_threads = threads;
    std::unique_ptr<Backend> b = MakeBackend(model, options);
    std::vector<float> logits(90 * 260);
    std::vector<DecodeItem> batch;
    for (int i = 0; i < 16; ++i) {
      const SlotId s = Allocate(*b);
      ASSERT_TRUE(b->Prefill(s, tokens, i == 0 ? absl::MakeSpan(logits) : absl::Span<float>())
                      .ok());
      batch.push_back({s, static_cast<TokenId>(i)});
    }
    std::vector<float> step(16 * 260);
    ASSERT_TRUE(b->Decode(batch, absl::MakeSpan(step)).ok());
    logits.insert(logits.end(), step.begin(), step.end());
    results.push_back(logits);
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(CpuBackendTest, CopyReadWriteRoundTrips) {
  const Model model = MakeRandomModel(TinyConfig(), 14);
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId a = Allocate(*b);
  const SlotId fork = Allocate(*b);
  const SlotId restored = Allocate(*b);
  ASSERT_TRUE(b->Prefill(a, RandomTokens(40, 260, 7), {}).ok());

  ASSERT_TRUE(b->CopySlot(a, fork).ok());
  const StateBlob blob = Read(*b, a);
  EXPECT_EQ(blob.position, 40);
  EXPECT_EQ(static_cast<int64_t>(blob.state.size()), model.config.StateFloatsPerSlot());
  ASSERT_TRUE(b->WriteSlot(restored, blob).ok());
  EXPECT_EQ(*b->SlotPosition(restored), 40);
  EXPECT_EQ(Read(*b, restored).state, blob.state);

  // All three continue identically.
  const std::vector<TokenId> more = RandomTokens(5, 260, 8);
  const std::vector<float> la = DecodeOneByOne(*b, a, more);
  EXPECT_EQ(DecodeOneByOne(*b, fork, more), la);
  EXPECT_EQ(DecodeOneByOne(*b, restored, more), la);
  EXPECT_EQ(*b->SlotPosition(fork), 45);

  // Reset: back to a fresh slot.
  ASSERT_TRUE(b->ResetSlot(a).ok());
  const StateBlob reset = Read(*b, a);
  EXPECT_EQ(reset.position, 0);
  EXPECT_TRUE(std::all_of(reset.state.begin(), reset.state.end(), [](float x) { return x == 0; }));
}

TEST(CpuBackendTest, PoolIsSizedByBudgetAndMaxSlots) {
  const Model model = MakeRandomModel(TinyConfig(), 15);
  const int64_t slot_bytes = model.config.StateFloatsPerSlot() * 4;
  BackendOptions options;
  options.state_memory_budget_bytes = slot_bytes * 3 + slot_bytes / 2;
  EXPECT_EQ(MakeBackend(model, options)->slot_capacity(), 3);
  options.max_slots = 2;
  std::unique_ptr<Backend> b = MakeBackend(model, options);
  EXPECT_EQ(b->slot_capacity(), 2);

  const SlotId s0 = Allocate(*b);
  const SlotId s1 = Allocate(*b);
  EXPECT_EQ(b->free_slots(), 0);
  absl::StatusOr<SlotId> full = b->AllocateSlot();
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("max_slots"));

  // A freed and reallocated slot starts from zero, whatever its previous session left.
  ASSERT_TRUE(b->Prefill(s0, RandomTokens(9, 260, 9), {}).ok());
  b->FreeSlot(s0);
  b->FreeSlot(s0);            // freeing twice is a no-op
  b->FreeSlot(SlotId{99});    // so is freeing a slot that does not exist
  EXPECT_EQ(b->free_slots(), 1);
  const SlotId again = Allocate(*b);
  EXPECT_EQ(*b->SlotPosition(again), 0);
  const StateBlob blob = Read(*b, again);
  EXPECT_TRUE(std::all_of(blob.state.begin(), blob.state.end(), [](float x) { return x == 0; }));
  EXPECT_NE(again, s1);
}

TEST(CpuBackendTest, OptionsOutOfRangeAreRejectedByName) {
  const Model model = MakeRandomModel(TinyConfig(), 16);
  auto error = [&](BackendOptions o) {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, o);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(b.status().message());
  };
  BackendOptions o;
  o.state_memory_budget_bytes = 16;
  EXPECT_THAT(error(o), HasSubstr("state_memory_budget_bytes"));
  o = {};
  o.max_slots = 0;
  EXPECT_THAT(error(o), HasSubstr("max_slots"));
  o = {};
  o.prefill_chunk_size = 0;
  EXPECT_THAT(error(o), HasSubstr("prefill_chunk_size"));
  o = {};
  o.prefill_chunk_size = 5000;
  EXPECT_THAT(error(o), HasSubstr("[1, 4096]"));
  o = {};
  o.num_threads = -1;
  EXPECT_THAT(error(o), HasSubstr("num_threads"));
  o = {};
  o.max_batch_size = 0;
  EXPECT_THAT(error(o), HasSubstr("max_batch_size"));
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendOptions options;
    options.max_batch_size = 4;
    backend_ = MakeBackend(model_, options);
    a_ = Allocate(*backend_);
    b_ = Allocate(*backend_);
    ASSERT_TRUE(backend_->Prefill(a_, RandomTokens(3, 260, 10), {}).ok());
    before_ = Read(*backend_, a_);
  }
  // Every rejected call leaves the state as it was.
  void TearDown() override {
    const StateBlob after = Read(*backend_, a_);
    EXPECT_EQ(after.position, before_.position);
    EXPECT_EQ(after.state, before_.state);
  }
  void ExpectInvalid(const absl::Status& s, const std::string& names) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(names));
  }

  Model model_ = MakeRandomModel(TinyConfig(), 17);
  std::unique_ptr<Backend> backend_;
  SlotId a_, b_;
  StateBlob before_;
  std::vector<float> one_ = std::vector<float>(260);
  std::vector<float> two_ = std::vector<float>(2 * 260);
};

TEST_F(BadInputTest, Prefill) {
  const std::vector<TokenId> ok = {1, 2, 3};
  ExpectInvalid(backend_->Prefill(SlotId{-1}, ok, {}), "Prefill: slot = -1 is not a slot id");
  ExpectInvalid(backend_->Prefill(SlotId{7}, ok, {}), "Prefill: slot = 7 is not an allocated");
  ExpectInvalid(backend_->Prefill(a_, {}, {}), "Prefill: tokens is empty");
  ExpectInvalid(backend_->Prefill(a_, std::vector<TokenId>{1, 260}, {}),
                "Prefill: tokens[1] = 260 is outside the vocabulary [0, 260)");
  ExpectInvalid(backend_->Prefill(a_, std::vector<TokenId>{-3}, {}), "tokens[0] = -3");
  ExpectInvalid(backend_->Prefill(a_, ok, absl::MakeSpan(two_)),
                "Prefill: logits has 520 floats; expected 0, 260");
}

TEST_F(BadInputTest, Decode) {
  ExpectInvalid(backend_->Decode({}, {}), "Decode: batch is empty");
  const std::vector<DecodeItem> dup = {{a_, 1}, {a_, 2}};
  ExpectInvalid(backend_->Decode(dup, absl::MakeSpan(two_)),
                "Decode: batch[1].slot = " + std::to_string(a_.value) + " appears twice");
  const std::vector<DecodeItem> unknown = {{a_, 1}, {SlotId{9}, 2}};
  ExpectInvalid(backend_->Decode(unknown, absl::MakeSpan(two_)), "Decode: batch[1].slot = 9");
  const std::vector<DecodeItem> bad_token = {{b_, 1}, {a_, 999}};
  ExpectInvalid(backend_->Decode(bad_token, absl::MakeSpan(two_)),
                "Decode: batch[1].token = 999 is outside the vocabulary");
  const std::vector<DecodeItem> pair = {{a_, 1}, {b_, 2}};
  ExpectInvalid(backend_->Decode(pair, absl::MakeSpan(one_)),
                "Decode: logits has 260 floats; expected");
  std::vector<SlotId> many;
  for (int i = 0; i < 3; ++i) many.push_back(Allocate(*backend_));
  std::vector<DecodeItem> five = {{a_, 1}, {b_, 1}};
  for (SlotId s : many) five.push_back({s, 1});
  std::vector<float> five_logits(5 * 260);
  ExpectInvalid(backend_->Decode(five, absl::MakeSpan(five_logits)),
                "Decode: batch has 5 items; max_batch_size is 4");
  // Slot b_ is untouched by the rejected batches that named it.
  EXPECT_EQ(*backend_->SlotPosition(b_), 0);
}

TEST_F(BadInputTest, Slots) {
  ExpectInvalid(backend_->CopySlot(a_, a_), "CopySlot: from and to are the same slot");
  ExpectInvalid(backend_->CopySlot(a_, SlotId{5}), "CopySlot: to = 5");
  ExpectInvalid(backend_->CopySlot(SlotId{5}, a_), "CopySlot: from = 5");
  ExpectInvalid(backend_->ResetSlot(SlotId{5}), "ResetSlot: slot = 5");
  ExpectInvalid(backend_->SlotPosition(SlotId{5}).status(), "SlotPosition: slot = 5");
  StateBlob out;
  ExpectInvalid(backend_->ReadSlot(SlotId{5}, out), "ReadSlot: slot = 5");
  StateBlob wrong = before_;
  wrong.state.pop_back();
  ExpectInvalid(backend_->WriteSlot(a_, wrong), "WriteSlot: in.state has");
  wrong = before_;
  wrong.position = -1;
  ExpectInvalid(backend_->WriteSlot(a_, wrong), "WriteSlot: in.position = -1 is negative");
  ExpectInvalid(backend_->WriteSlot(SlotId{5}, before_), "WriteSlot: slot = 5");
}

TEST(CpuBackendTest, LearnedPositionsPastTheTableAreOutOfRange) {
  ModelConfig config = TinyConfig();
  config.position = PositionEmbedding::kLearned;
  config.max_position = 10;
  const Model model = MakeRandomModel(config, 18);
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId s = Allocate(*b);
  absl::Status st = b->Prefill(s, RandomTokens(11, 260, 11), {});
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("max_position 10"));
  EXPECT_EQ(*b->SlotPosition(s), 0);

  ASSERT_TRUE(b->Prefill(s, RandomTokens(10, 260, 11), {}).ok());  // exactly fills the table
  std::vector<float> logits(260);
  const DecodeItem item{s, 1};
  st = b->Decode({&item, 1}, absl::MakeSpan(logits));
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("batch[0]"));
  EXPECT_EQ(*b->SlotPosition(s), 10);

  StateBlob blob = Read(*b, s);
  blob.position = 11;
  EXPECT_EQ(b->WriteSlot(s, blob).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace linserve
