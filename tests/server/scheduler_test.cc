// The scheduler against a simulated model: thousands of steps of random arrivals, prompt
// lengths and generation lengths, checking the plan's guarantees at every step.
#include "server/engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace linserve {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(SchedulerTest, DecodesEveryJobUnderTheCapAlongsidePrefill) {
  const std::vector<JobView> jobs = {
      {JobId{1}, 0, 5}, {JobId{2}, 1000, -1}, {JobId{3}, 0, 7}, {JobId{4}, 10, -1}};
  const StepPlan plan = PlanStep(jobs, {.max_batch_size = 8, .prefill_token_budget = 64});
  EXPECT_EQ(plan.decode, (std::vector<JobId>{JobId{1}, JobId{3}}));
  ASSERT_EQ(plan.prefill.size(), 1u);
  EXPECT_EQ(plan.prefill[0].id, JobId{2});
  EXPECT_EQ(plan.prefill[0].tokens, 64);
}

TEST(SchedulerTest, SplitsTheBudgetFirstComeFirstServed) {
  const std::vector<JobView> jobs = {
      {JobId{1}, 5, -1}, {JobId{2}, 20, -1}, {JobId{3}, 30, -1}, {JobId{4}, 8, -1}};
  const StepPlan plan = PlanStep(jobs, {.max_batch_size = 8, .prefill_token_budget = 32});
  EXPECT_TRUE(plan.decode.empty());
  ASSERT_EQ(plan.prefill.size(), 3u);
  EXPECT_EQ(plan.prefill[0].id, JobId{1});
  EXPECT_EQ(plan.prefill[0].tokens, 5);
  EXPECT_EQ(plan.prefill[1].id, JobId{2});
  EXPECT_EQ(plan.prefill[1].tokens, 20);
  EXPECT_EQ(plan.prefill[2].id, JobId{3});
  EXPECT_EQ(plan.prefill[2].tokens, 7);
}

TEST(SchedulerTest, OverTheCapServesTheLeastRecentlyServedInAdmissionOrder) {
  const std::vector<JobView> jobs = {
      {JobId{1}, 0, 9}, {JobId{2}, 0, 3}, {JobId{3}, 0, 3}, {JobId{4}, 0, 1}, {JobId{5}, 0, 9}};
  const StepPlan plan = PlanStep(jobs, {.max_batch_size = 3, .prefill_token_budget = 1});
  EXPECT_EQ(plan.decode, (std::vector<JobId>{JobId{2}, JobId{3}, JobId{4}}));
}

TEST(SchedulerTest, ValidatesLimits) {
  EXPECT_TRUE(ValidateSchedulerLimits({.max_batch_size = 1, .prefill_token_budget = 1}).ok());
  const absl::Status batch = ValidateSchedulerLimits({.max_batch_size = 0, .prefill_token_budget = 1});
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(batch.message().find("max_batch_size"), absl::string_view::npos);
  const absl::Status budget = ValidateSchedulerLimits({.max_batch_size = 1, .prefill_token_budget = -1});
  EXPECT_NE(budget.message().find("prefill_token_budget"), absl::string_view::npos);
}

// A simulated engine: jobs arrive at random, prefill their prompt in the chunks the plan gives,
// then decode until their generation length; the plan is checked against its contract at every
// step and every job must finish.
struct SimJob {
  JobId id;
  int64_t prompt = 0;
  int64_t prefill_remaining = 0;
  int64_t to_generate = 0;
  int64_t last_token_step = -1;
  int64_t waited = 0;  // consecutive steps a decoding job was passed over
};

// Sets *max_decoding_seen to the largest number of decoding jobs seen at once.
void Simulate(uint64_t seed, const SchedulerLimits& limits, int steps, double arrival_rate,
              int64_t max_prompt, int64_t max_generate, int64_t* max_decoding_seen) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int64_t> prompt_len(1, max_prompt);
  std::uniform_int_distribution<int64_t> gen_len(1, max_generate);

  std::vector<SimJob> jobs;  // admission order
  uint64_t next_id = 1;
  int64_t finished = 0;
  int64_t arrived = 0;
  int64_t max_decoding = 0;
  int64_t max_wait = 0;
  for (int step = 0; step < steps; ++step) {
    const bool arrivals_open = step < steps * 3 / 4;
    while (arrivals_open && unit(rng) < arrival_rate) {
      const int64_t prompt = prompt_len(rng);
      jobs.push_back({JobId{next_id++}, prompt, prompt, gen_len(rng), -1, 0});
      ++arrived;
      if (unit(rng) < 0.5) break;
    }
    std::vector<JobView> views;
    int64_t decoding = 0;
    int64_t total_remaining = 0;
    for (const SimJob& j : jobs) {
      views.push_back({j.id, j.prefill_remaining, j.last_token_step});
      decoding += j.prefill_remaining == 0 ? 1 : 0;
      total_remaining += j.prefill_remaining;
    }
    max_decoding = std::max(max_decoding, decoding);
    const StepPlan plan = PlanStep(views, limits);

    // Decode: the right count, only decoding jobs, admission order, distinct.
    EXPECT_EQ(static_cast<int64_t>(plan.decode.size()),
              std::min<int64_t>(decoding, limits.max_batch_size));
    std::set<JobId> decoded(plan.decode.begin(), plan.decode.end());
    EXPECT_EQ(decoded.size(), plan.decode.size());
    // Prefill: the whole budget or everything left, FCFS prefix, each chunk within bounds.
    int64_t prefilled = 0;
    size_t next_prefilling = 0;
    for (const PrefillChunk& chunk : plan.prefill) {
      while (next_prefilling < jobs.size() && jobs[next_prefilling].prefill_remaining == 0) {
        ++next_prefilling;
      }
      ASSERT_LT(next_prefilling, jobs.size());
      const SimJob& j = jobs[next_prefilling++];
      ASSERT_EQ(chunk.id, j.id) << "prefill must go to the earliest admitted prompts";
      ASSERT_GE(chunk.tokens, 1);
      ASSERT_LE(chunk.tokens, j.prefill_remaining);
      ASSERT_FALSE(decoded.contains(chunk.id));
      if (&chunk != &plan.prefill.back()) {
        ASSERT_EQ(chunk.tokens, j.prefill_remaining);
      }
      prefilled += chunk.tokens;
    }
    ASSERT_EQ(prefilled, std::min<int64_t>(limits.prefill_token_budget, total_remaining));

    // Apply the plan.
    std::map<JobId, int32_t> chunk_of;
    for (const PrefillChunk& chunk : plan.prefill) chunk_of[chunk.id] = chunk.tokens;
    for (SimJob& j : jobs) {
      if (decoded.contains(j.id)) {
        ASSERT_EQ(j.prefill_remaining, 0);
        j.last_token_step = step;
        j.waited = 0;
        --j.to_generate;
      } else if (auto it = chunk_of.find(j.id); it != chunk_of.end()) {
        j.prefill_remaining -= it->second;
        if (j.prefill_remaining == 0) {  // the last chunk yields the first token
          j.last_token_step = step;
          --j.to_generate;
        }
      } else if (j.prefill_remaining == 0) {
        ++j.waited;
        max_wait = std::max(max_wait, j.waited);
        // No decoding job waits longer than a full rotation of the largest population seen.
        ASSERT_LE(j.waited, CeilDiv(max_decoding, limits.max_batch_size))
            << "job " << j.id.value << " starved at step " << step;
      }
    }
    const auto done = std::remove_if(jobs.begin(), jobs.end(),
                                     [](const SimJob& j) { return j.to_generate <= 0; });
    finished += jobs.end() - done;
    jobs.erase(done, jobs.end());
  }
  EXPECT_TRUE(jobs.empty()) << jobs.size() << " jobs never finished";
  EXPECT_EQ(finished, arrived);
  EXPECT_GT(arrived, 100);
  *max_decoding_seen = max_decoding;
}

TEST(SchedulerTest, SimulatedWorkloadUnderTheBatchCap) {
  int64_t max_decoding = 0;
  Simulate(/*seed=*/1, {.max_batch_size = 64, .prefill_token_budget = 128}, /*steps=*/5000,
           /*arrival_rate=*/0.2, /*max_prompt=*/600, /*max_generate=*/80, &max_decoding);
  EXPECT_LE(max_decoding, 64);
}

TEST(SchedulerTest, SimulatedWorkloadOverTheBatchCap) {
  int64_t max_decoding = 0;
  Simulate(/*seed=*/2, {.max_batch_size = 4, .prefill_token_budget = 32}, /*steps=*/8000,
           /*arrival_rate=*/0.2, /*max_prompt=*/100, /*max_generate=*/30, &max_decoding);
  EXPECT_GT(max_decoding, 3 * 4) << "the workload should keep the batch cap busy";
}

TEST(SchedulerTest, LongPromptsNeverStallDecoders) {
  // While a 50k-token prompt is prefilled 16 tokens per step, every decoding job gets a token
  // every step.
  std::vector<JobView> jobs = {{JobId{1}, 0, 0}, {JobId{2}, 50000, -1}, {JobId{3}, 0, 0}};
  for (int step = 1; jobs[1].prefill_remaining > 0; ++step) {
    const StepPlan plan = PlanStep(jobs, {.max_batch_size = 8, .prefill_token_budget = 16});
    ASSERT_EQ(plan.decode, (std::vector<JobId>{JobId{1}, JobId{3}}));
    ASSERT_EQ(plan.prefill.size(), 1u);
    ASSERT_EQ(plan.prefill[0].tokens, std::min<int64_t>(16, jobs[1].prefill_remaining));
    jobs[1].prefill_remaining -= plan.prefill[0].tokens;
    jobs[0].last_token_step = jobs[2].last_token_step = step;
  }
}

}  // namespace
}  // namespace linserve
