// Backend's sampling contract (model/backend/backend.h) on the CPU backend, the source of truth:
// the picks are model/backend/sampler.h's on the logits Decode gives, alone or in any batch; the
// seen counts live with the slot (kept across requests, copied by CopySlot, cleared by ResetSlot
// and WriteSlot, restored by SetSeenCounts); logprobs come back only for the slots that ask; each
// row's token mask restricts its pick and logprobs, and a mask allowing nothing is refused.
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/backend/sampler.h"
#include "model/backend/token_mask.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 260;

std::vector<TokenId> Tokens(int n, uint64_t seed) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[i] = static_cast<TokenId>((seed * 131 + i * 977) % kVocab);
  return t;
}

std::unique_ptr<Backend> MakeBackend(const Model& model) {
  BackendOptions options;
  options.num_threads = 2;
  options.max_batch_size = 64;
  options.max_slots = 160;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

SlotId Allocate(Backend& b) {
  absl::StatusOr<SlotId> s = b.AllocateSlot();
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

SamplingParams Params(int i) {
  SamplingParams p;
  p.temperature = i % 5 == 0 ? 0.0f : 0.7f + 0.01f * i;
  p.top_k = i % 3 == 0 ? 0 : 40;
  p.top_p = i % 2 == 0 ? 0.9f : 1.0f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.0f + 0.05f * (i % 4);
  p.presence_penalty = 0.3f * (i % 3);
  p.frequency_penalty = 0.2f * (i % 2);
  p.seed = 1000 + static_cast<uint64_t>(i);
  return p;
}

// One row's buffers for a SampleOutput.
struct Out {
  explicit Out(size_t rows)
      : tokens(rows), logprobs(rows), top(rows * static_cast<size_t>(kMaxTopLogprobs)) {}
  SampleOutput view() {
    return {absl::MakeSpan(tokens), absl::MakeSpan(logprobs), absl::MakeSpan(top)};
  }
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  std::vector<TokenLogprob> top;
};

// Untied: a tied random model mostly predicts its input token again.
Model TestModel() {
  ModelConfig c = TinyConfig();
  c.tie_embeddings = false;
  return MakeRandomModel(c, 12);
}

TEST(BackendSamplingTest, PicksWhatTheHostSamplerPicksFromDecodesLogits) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  const std::vector<TokenId> prompt = Tokens(9, 1);
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    const SlotId host = Allocate(*b);
    const SlotId device = Allocate(*b);
    std::vector<float> logits(kVocab);
    ASSERT_TRUE(b->Prefill(host, prompt, absl::MakeSpan(logits)).ok());
    Sampler sampler(Params(i));
    sampler.Observe(prompt);
    std::vector<TokenId> expected = {sampler.Sample(logits)};

    ASSERT_TRUE(b->StartSampling(device, Params(i), /*top_logprobs=*/3, prompt).ok());
    Out out(1);
    ASSERT_TRUE(b->PrefillAndSample(device, prompt, out.view(), nullptr).ok());
    std::vector<TokenId> got = {out.tokens[0]};
    EXPECT_FLOAT_EQ(out.logprobs[0], LogProbOf(logits, got[0]));
    const std::vector<TokenLogprob> top = TopLogprobs(logits, 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(out.top[k].token, top[k].token);
      EXPECT_FLOAT_EQ(out.top[k].logprob, top[k].logprob);
    }
    for (int step = 0; step < 30; ++step) {
      const DecodeItem h{host, expected.back()};
      ASSERT_TRUE(b->Decode({&h, 1}, absl::MakeSpan(logits)).ok());
      expected.push_back(sampler.Sample(logits));
      const DecodeItem d{device, got.back()};
      ASSERT_TRUE(b->DecodeAndSample({&d, 1}, out.view()).ok());
      got.push_back(out.tokens[0]);
      EXPECT_FLOAT_EQ(out.logprobs[0], LogProbOf(logits, got.back()));
    }
    EXPECT_EQ(got, expected);
    b->FreeSlot(host);
    b->FreeSlot(device);
  }
}

TEST(BackendSamplingTest, SameSeedSameTokensAloneAndInBatchOf64) {
  const Model model = TestModel();
  const int steps = 24;
  std::unique_ptr<Backend> b = MakeBackend(model);
  std::vector<SlotId> slots;
  std::vector<TokenId> next;
  Out first(1);
  for (int i = 0; i < 64; ++i) {
    slots.push_back(Allocate(*b));
    const std::vector<TokenId> prompt = Tokens(3 + i % 9, 500 + i);
    ASSERT_TRUE(b->StartSampling(slots[i], Params(i), i % 7 == 0 ? 2 : 0, prompt).ok());
    ASSERT_TRUE(b->PrefillAndSample(slots[i], prompt, first.view(), nullptr).ok());
    next.push_back(first.tokens[0]);
  }
  std::vector<TokenId> batched = {next[13]};
  Out out(64);
  for (int step = 1; step < steps; ++step) {
    std::vector<DecodeItem> batch;
    for (int i = 0; i < 64; ++i) batch.push_back({slots[i], next[i]});
    ASSERT_TRUE(b->DecodeAndSample(batch, out.view()).ok());
    next = out.tokens;
    batched.push_back(next[13]);
  }

  std::unique_ptr<Backend> solo = MakeBackend(model);
  const SlotId s = Allocate(*solo);
  const std::vector<TokenId> prompt = Tokens(3 + 13 % 9, 500 + 13);
  ASSERT_TRUE(solo->StartSampling(s, Params(13), 0, prompt).ok());
  Out one(1);
  ASSERT_TRUE(solo->PrefillAndSample(s, prompt, one.view(), nullptr).ok());
  std::vector<TokenId> alone = {one.tokens[0]};
  for (int step = 1; step < steps; ++step) {
    const DecodeItem item{s, alone.back()};
    ASSERT_TRUE(solo->DecodeAndSample({&item, 1}, one.view()).ok());
    alone.push_back(one.tokens[0]);
  }
  EXPECT_EQ(alone, batched);
  EXPECT_GT(std::set<TokenId>(alone.begin(), alone.end()).size(), 3u);
}

// Two requests on one session with penalties: the slot that stays resident keeps its counts
// (the second StartSampling adds only the new prompt); a slot loaded from the first slot's
// state with SetSeenCounts(all tokens so far) picks the same; and both equal a host Sampler that
// observed the whole history.
TEST(BackendSamplingTest, SeenCountsLiveWithTheSlotAcrossRequests) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  SamplingParams p = Params(1);
  p.repetition_penalty = 1.6f;
  p.frequency_penalty = 0.8f;
  const std::vector<TokenId> prompt1 = Tokens(12, 7), prompt2 = Tokens(5, 8);
  const SlotId resident = Allocate(*b);
  std::vector<TokenId> history = prompt1;
  ASSERT_TRUE(b->StartSampling(resident, p, 0, prompt1).ok());
  Out out(1);
  ASSERT_TRUE(b->PrefillAndSample(resident, prompt1, out.view(), nullptr).ok());
  history.push_back(out.tokens[0]);
  for (int step = 0; step < 10; ++step) {
    const DecodeItem item{resident, history.back()};
    ASSERT_TRUE(b->DecodeAndSample({&item, 1}, out.view()).ok());
    history.push_back(out.tokens[0]);
  }
  // The request ends with its last token sent but not fed; the next request feeds it first.
  const TokenId pending = history.back();

  StateBlob blob;
  ASSERT_TRUE(b->ReadSlot(resident, blob).ok());
  const SlotId loaded = Allocate(*b);
  ASSERT_TRUE(b->WriteSlot(loaded, blob).ok());
  std::map<TokenId, int64_t> counted;
  for (TokenId t : history) ++counted[t];
  std::vector<TokenCount> counts;
  for (const auto& [t, c] : counted) counts.push_back({t, c});
  ASSERT_TRUE(b->SetSeenCounts(loaded, counts).ok());

  p.seed = 99;
  std::vector<TokenId> feed = {pending};
  feed.insert(feed.end(), prompt2.begin(), prompt2.end());
  std::vector<std::vector<TokenId>> continuations;
  for (SlotId slot : {resident, loaded}) {
    ASSERT_TRUE(b->StartSampling(slot, p, 0, prompt2).ok());
    ASSERT_TRUE(b->PrefillAndSample(slot, feed, out.view(), nullptr).ok());
    std::vector<TokenId> c = {out.tokens[0]};
    for (int step = 0; step < 12; ++step) {
      const DecodeItem item{slot, c.back()};
      ASSERT_TRUE(b->DecodeAndSample({&item, 1}, out.view()).ok());
      c.push_back(out.tokens[0]);
    }
    continuations.push_back(c);
  }
  EXPECT_EQ(continuations[0], continuations[1]);

  // The host Sampler over the whole history, fed the same logits.
  const SlotId reference = Allocate(*b);
  ASSERT_TRUE(b->WriteSlot(reference, blob).ok());
  Sampler sampler(p);
  sampler.Observe(history);
  sampler.Observe(prompt2);
  std::vector<float> logits(kVocab);
  ASSERT_TRUE(b->Prefill(reference, feed, absl::MakeSpan(logits)).ok());
  std::vector<TokenId> expected = {sampler.Sample(logits)};
  for (int step = 0; step < 12; ++step) {
    const DecodeItem item{reference, expected.back()};
    ASSERT_TRUE(b->Decode({&item, 1}, absl::MakeSpan(logits)).ok());
    expected.push_back(sampler.Sample(logits));
  }
  EXPECT_EQ(continuations[0], expected);
}

TEST(BackendSamplingTest, ForkCarriesTheSamplerAndResetOrWriteClearsIt) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId a = Allocate(*b), fork = Allocate(*b);
  const std::vector<TokenId> prompt = Tokens(6, 3);
  Out out(1);
  const DecodeItem item{a, 4};
  absl::Status status = b->DecodeAndSample({&item, 1}, out.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("StartSampling"));
  EXPECT_EQ(b->PrefillAndSample(a, prompt, out.view(), nullptr).code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(b->StartSampling(a, Params(2), 0, prompt).ok());
  ASSERT_TRUE(b->PrefillAndSample(a, prompt, out.view(), nullptr).ok());
  ASSERT_TRUE(b->CopySlot(a, fork).ok());
  TokenId ta = out.tokens[0], tf = out.tokens[0];
  Out two(2);
  for (int i = 0; i < 20; ++i) {
    const DecodeItem batch[] = {{a, ta}, {fork, tf}};
    ASSERT_TRUE(b->DecodeAndSample(batch, two.view()).ok());
    ASSERT_EQ(two.tokens[0], two.tokens[1]) << "step " << i;
    ta = two.tokens[0];
    tf = two.tokens[1];
  }

  StateBlob blob;
  ASSERT_TRUE(b->ReadSlot(a, blob).ok());
  ASSERT_TRUE(b->WriteSlot(fork, blob).ok());
  const DecodeItem forked{fork, tf};
  EXPECT_EQ(b->DecodeAndSample({&forked, 1}, out.view()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(b->ResetSlot(a).ok());
  EXPECT_EQ(b->DecodeAndSample({&item, 1}, out.view()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(BackendSamplingTest, ArgumentsAreCheckedNamingTheField) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId s = Allocate(*b);
  auto message_of = [](const absl::Status& status) { return std::string(status.message()); };

  SamplingParams bad;
  bad.top_p = 0.0f;
  EXPECT_THAT(message_of(b->StartSampling(s, bad, 0, {})), HasSubstr("top_p"));
  EXPECT_THAT(message_of(b->StartSampling(s, SamplingParams(), kMaxTopLogprobs + 1, {})),
              HasSubstr("top_logprobs"));
  const TokenId outside[] = {1, kVocab};
  EXPECT_THAT(message_of(b->StartSampling(s, SamplingParams(), 0, outside)),
              HasSubstr("observed[1]"));
  SamplingParams biased;
  biased.logit_bias = {{2, 1.0f}, {kVocab, -3.0f}};
  EXPECT_THAT(message_of(b->StartSampling(s, biased, 0, {})),
              HasSubstr("logit_bias: token 260 is outside the vocabulary [0, 260)"));
  EXPECT_THAT(message_of(b->StartSampling(SlotId{150}, SamplingParams(), 0, {})),
              HasSubstr("not an allocated slot"));
  const TokenCount negative[] = {{3, -1}};
  EXPECT_THAT(message_of(b->SetSeenCounts(s, negative)), HasSubstr("counts[0].count"));
  const TokenCount unknown[] = {{kVocab + 3, 1}};
  EXPECT_THAT(message_of(b->SetSeenCounts(s, unknown)), HasSubstr("counts[0].token"));

  ASSERT_TRUE(b->StartSampling(s, SamplingParams(), 2, {}).ok());
  const DecodeItem item{s, 1};
  std::vector<TokenId> two_tokens(2);
  EXPECT_THAT(message_of(b->DecodeAndSample({&item, 1}, {.tokens = absl::MakeSpan(two_tokens)})),
              HasSubstr("out.tokens"));
  TokenId token;
  EXPECT_THAT(message_of(b->DecodeAndSample({&item, 1}, {.tokens = {&token, 1}})),
              HasSubstr("top_logprobs"));
  // Nothing ran: the slot is still at position 0.
  EXPECT_EQ(*b->SlotPosition(s), 0);
}

// A token mask over kVocab allowing `allowed`.
std::vector<uint32_t> MaskOf(const std::vector<TokenId>& allowed) {
  std::vector<uint32_t> mask(TokenMaskWords(kVocab), 0);
  for (TokenId t : allowed) mask[t / 32] |= uint32_t{1} << (t % 32);
  return mask;
}

// Every third token from `first`, so that masks differ by row and by step.
std::vector<uint32_t> StridedMask(int first) {
  std::vector<TokenId> allowed;
  for (TokenId t = first % 3; t < kVocab; t += 3) allowed.push_back(t);
  return MaskOf(allowed);
}

// DecodeAndSample with masks on some rows only: each row picks, and reports the logprobs of,
// what the host Sampler does with the row's mask on the logits Decode gives; the unmasked rows
// are unaffected. PrefillAndSample takes its mask the same way.
TEST(BackendSamplingTest, DecodeAndPrefillAndSampleHonourEachRowsMask) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  constexpr int kRows = 6;
  std::vector<SlotId> slots, hosts;
  std::vector<Sampler> samplers;
  std::vector<TokenId> next, expected_next;
  Out first(1);
  std::vector<float> logits(kVocab);
  for (int i = 0; i < kRows; ++i) {
    const std::vector<TokenId> prompt = Tokens(4 + i, 40 + i);
    slots.push_back(Allocate(*b));
    hosts.push_back(Allocate(*b));
    ASSERT_TRUE(b->StartSampling(slots[i], Params(i), /*top_logprobs=*/4, prompt).ok());
    samplers.emplace_back(Params(i));
    samplers.back().Observe(prompt);
    const std::vector<uint32_t> mask = StridedMask(i);
    const uint32_t* row_mask = i % 2 == 0 ? mask.data() : nullptr;
    ASSERT_TRUE(b->PrefillAndSample(slots[i], prompt, first.view(), row_mask).ok());
    ASSERT_TRUE(b->Prefill(hosts[i], prompt, absl::MakeSpan(logits)).ok());
    ASSERT_EQ(first.tokens[0], samplers[i].Sample(logits, row_mask)) << "row " << i;
    EXPECT_FLOAT_EQ(first.logprobs[0], LogProbOf(logits, first.tokens[0], row_mask));
    next.push_back(first.tokens[0]);
  }
  expected_next = next;
  Out out(kRows);
  int masked_picks = 0;
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE(step);
    // Rows 0 and 3 masked every step, row 4 every other step, a one-token mask on row 5 at
    // step 7; the others never.
    std::vector<std::vector<uint32_t>> masks(kRows);
    std::vector<DecodeItem> batch;
    for (int i = 0; i < kRows; ++i) {
      if (i == 0 || i == 3 || (i == 4 && step % 2 == 0)) masks[i] = StridedMask(i + step);
      if (i == 5 && step == 7) masks[i] = MaskOf({kVocab - 1});
      batch.push_back({slots[i], next[i], masks[i].empty() ? nullptr : masks[i].data()});
    }
    ASSERT_TRUE(b->DecodeAndSample(batch, out.view()).ok());
    for (int i = 0; i < kRows; ++i) {
      const DecodeItem host{hosts[i], expected_next[i]};
      ASSERT_TRUE(b->Decode({&host, 1}, absl::MakeSpan(logits)).ok());
      const uint32_t* mask = batch[i].allowed_tokens;
      expected_next[i] = samplers[i].Sample(logits, mask);
      ASSERT_EQ(out.tokens[i], expected_next[i]) << "row " << i;
      ASSERT_TRUE(TokenAllowed(mask, out.tokens[i])) << "row " << i;
      EXPECT_FLOAT_EQ(out.logprobs[i], LogProbOf(logits, out.tokens[i], mask)) << "row " << i;
      const std::vector<TokenLogprob> top = TopLogprobs(logits, 4, mask);
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(out.top[i * kMaxTopLogprobs + k].token, top[k].token) << "row " << i;
        EXPECT_FLOAT_EQ(out.top[i * kMaxTopLogprobs + k].logprob, top[k].logprob);
      }
      masked_picks += mask != nullptr ? 1 : 0;
    }
    if (step == 7) {
      EXPECT_EQ(out.tokens[5], kVocab - 1);
    }
    next = out.tokens;
  }
  EXPECT_GT(masked_picks, 40);
}

// PrefillBatch passes each sampling item's mask: a one-token mask picks that token with log p 0,
// a wide one keeps the pick inside it, and a batch of one item picks exactly what the host
// Sampler picks from Prefill's logits with that mask.
TEST(BackendSamplingTest, PrefillBatchHonoursEachItemsMask) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  const std::vector<uint32_t> one = MaskOf({7});
  const std::vector<uint32_t> wide = StridedMask(1);
  std::vector<std::vector<TokenId>> prompts;
  std::vector<SlotId> slots;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Tokens(5 + i, 70 + i));
    slots.push_back(Allocate(*b));
    ASSERT_TRUE(b->StartSampling(slots[i], Params(i + 1), /*top_logprobs=*/2, prompts[i]).ok());
  }
  const std::vector<PrefillItem> batch = {
      {.slot = slots[0], .tokens = prompts[0], .sample = true, .allowed_tokens = one.data()},
      {.slot = slots[1], .tokens = prompts[1], .sample = false},
      {.slot = slots[2], .tokens = prompts[2], .sample = true, .allowed_tokens = wide.data()},
      {.slot = slots[3], .tokens = prompts[3], .sample = true}};
  Out out(3);
  ASSERT_TRUE(b->PrefillBatch(batch, out.view()).ok());
  EXPECT_EQ(out.tokens[0], 7);
  EXPECT_FLOAT_EQ(out.logprobs[0], 0.0f);
  EXPECT_EQ(out.top[0].token, 7);
  EXPECT_EQ(out.top[1].logprob, -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(TokenAllowed(wide.data(), out.tokens[1])) << out.tokens[1];

  const SlotId alone = Allocate(*b), host = Allocate(*b);
  const std::vector<TokenId> prompt = Tokens(9, 5);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SamplingParams p = Params(1);
    p.seed = seed;
    ASSERT_TRUE(b->ResetSlot(alone).ok());
    ASSERT_TRUE(b->ResetSlot(host).ok());
    ASSERT_TRUE(b->StartSampling(alone, p, 0, prompt).ok());
    const PrefillItem item{
        .slot = alone, .tokens = prompt, .sample = true, .allowed_tokens = wide.data()};
    TokenId token = -1;
    ASSERT_TRUE(b->PrefillBatch({&item, 1}, {.tokens = {&token, 1}}).ok());
    std::vector<float> logits(kVocab);
    ASSERT_TRUE(b->Prefill(host, prompt, absl::MakeSpan(logits)).ok());
    Sampler sampler(p);
    sampler.Observe(prompt);
    EXPECT_EQ(token, sampler.Sample(logits, wide.data())) << "seed " << seed;
  }
}

// A mask that allows no token of the vocabulary (bits past it do not count) is
// INVALID_ARGUMENT naming the row, and nothing has run: every slot is where it was.
TEST(BackendSamplingTest, AMaskAllowingNoTokenIsRefusedBeforeAnythingRuns) {
  const Model model = TestModel();
  std::unique_ptr<Backend> b = MakeBackend(model);
  const SlotId a = Allocate(*b), c = Allocate(*b);
  for (SlotId s : {a, c}) ASSERT_TRUE(b->StartSampling(s, Params(1), 0, {}).ok());
  std::vector<uint32_t> nothing(TokenMaskWords(kVocab), 0);
  nothing.back() = ~uint32_t{0} << (kVocab % 32);  // only bits past the vocabulary
  const std::vector<uint32_t> fine = StridedMask(0);
  Out two(2);
  const DecodeItem batch[] = {{a, 3, fine.data()}, {c, 4, nothing.data()}};
  absl::Status status = b->DecodeAndSample(batch, two.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("DecodeAndSample: row 1's allowed_tokens allows no token"));

  Out one(1);
  const std::vector<TokenId> prompt = Tokens(4, 2);
  status = b->PrefillAndSample(a, prompt, one.view(), nothing.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("PrefillAndSample: row 0's allowed_tokens"));

  const std::vector<PrefillItem> items = {
      {.slot = a, .tokens = prompt, .sample = true, .allowed_tokens = fine.data()},
      {.slot = c, .tokens = prompt, .sample = true, .allowed_tokens = nothing.data()}};
  status = b->PrefillBatch(items, two.view());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("PrefillBatch: row 1's allowed_tokens"));
  EXPECT_EQ(*b->SlotPosition(a), 0);
  EXPECT_EQ(*b->SlotPosition(c), 0);
}

}  // namespace
}  // namespace linserve
