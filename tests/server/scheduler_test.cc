// The scheduler against a simulated model: thousands of steps of random arrivals, prompt
// lengths and generation lengths, checking the plan's guarantees at every step.
#include "server/engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <limits>
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
  const StepPlan plan = PlanStep(
      jobs, {.max_batch_size = 8, .prefill_token_budget = 32, .idle_prefill_token_budget = 32});
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

TEST(SchedulerTest, TheBudgetFollowsTheLoad) {
  const SchedulerLimits limits = {.max_batch_size = 64,
                                  .prefill_token_budget = 32,
                                  .prefill_tokens_per_decode_row = 2,
                                  .idle_prefill_token_budget = 4096};
  std::vector<JobView> jobs = {{JobId{1}, 100000, -1}};
  // Nothing to decode: the idle budget.
  EXPECT_EQ(PlanStep(jobs, limits).prefill[0].tokens, 4096);
  // A few decoding jobs: the floor.
  for (uint64_t i = 2; i < 12; ++i) jobs.push_back({JobId{i}, 0, 0});
  EXPECT_EQ(PlanStep(jobs, limits).prefill[0].tokens, 32);
  // 40 decoding jobs: 2 tokens per decode row.
  for (uint64_t i = 12; i < 42; ++i) jobs.push_back({JobId{i}, 0, 0});
  EXPECT_EQ(PlanStep(jobs, limits).prefill[0].tokens, 80);
  // Past the batch cap, rows decoded this step count, not jobs waiting.
  for (uint64_t i = 42; i < 100; ++i) jobs.push_back({JobId{i}, 0, 0});
  EXPECT_EQ(PlanStep(jobs, limits).prefill[0].tokens, 128);
}

TEST(SchedulerTest, FeedsAtMostMaxBatchSizePromptsPerStep) {
  std::vector<JobView> jobs;
  for (uint64_t i = 1; i <= 10; ++i) jobs.push_back({JobId{i}, 3, -1});
  const StepPlan plan = PlanStep(jobs, {.max_batch_size = 4});
  ASSERT_EQ(plan.prefill.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(plan.prefill[i].id, JobId{i + 1});
}

TEST(SchedulerTest, DefaultsPerDevice) {
  for (DeviceKind device : {DeviceKind::kCpu, DeviceKind::kCuda}) {
    EXPECT_TRUE(ValidateSchedulerLimits(SchedulerDefaults(device)).ok());
  }
  // A GPU's decode step costs what hundreds of prompt tokens do; a CPU's what a few dozen do.
  EXPECT_GT(SchedulerDefaults(DeviceKind::kCuda).prefill_token_budget,
            SchedulerDefaults(DeviceKind::kCpu).prefill_token_budget);
}

TEST(SchedulerTest, ValidatesLimits) {
  EXPECT_TRUE(ValidateSchedulerLimits({.max_batch_size = 1,
                                       .prefill_token_budget = 1,
                                       .prefill_tokens_per_decode_row = 0,
                                       .idle_prefill_token_budget = 1})
                  .ok());
  const absl::Status batch = ValidateSchedulerLimits({.max_batch_size = 0});
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(batch.message().find("max_batch_size"), absl::string_view::npos);
  const absl::Status budget = ValidateSchedulerLimits({.prefill_token_budget = -1});
  EXPECT_NE(budget.message().find("prefill_token_budget"), absl::string_view::npos);
  const absl::Status per_row = ValidateSchedulerLimits({.prefill_tokens_per_decode_row = -1});
  EXPECT_NE(per_row.message().find("prefill_tokens_per_decode_row"), absl::string_view::npos);
  const absl::Status idle =
      ValidateSchedulerLimits({.prefill_token_budget = 64, .idle_prefill_token_budget = 63});
  EXPECT_NE(idle.message().find("idle_prefill_token_budget must be >= prefill_token_budget (64)"),
            absl::string_view::npos);
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
    int64_t total_remaining = 0;  // of the first max_batch_size prompts
    int64_t prompts = 0;
    for (const SimJob& j : jobs) {
      views.push_back({j.id, j.prefill_remaining, j.last_token_step});
      decoding += j.prefill_remaining == 0 ? 1 : 0;
      if (j.prefill_remaining > 0 && prompts++ < limits.max_batch_size) {
        total_remaining += j.prefill_remaining;
      }
    }
    max_decoding = std::max(max_decoding, decoding);
    const StepPlan plan = PlanStep(views, limits);

    // Decode: the right count, only decoding jobs, admission order, distinct.
    EXPECT_EQ(static_cast<int64_t>(plan.decode.size()),
              std::min<int64_t>(decoding, limits.max_batch_size));
    std::set<JobId> decoded(plan.decode.begin(), plan.decode.end());
    EXPECT_EQ(decoded.size(), plan.decode.size());
    // Prefill: the whole budget or everything the first max_batch_size prompts have left,
    // FCFS prefix, each chunk within bounds.
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
    ASSERT_LE(plan.prefill.size(), static_cast<size_t>(limits.max_batch_size));
    ASSERT_EQ(prefilled,
              std::min<int64_t>(PrefillBudget(limits, std::ssize(plan.decode)), total_remaining));

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

// The serving benchmark's shape against a simulated cost model: 32 sessions stream tokens
// without end while 8k-token prompts arrive at random and, once prefilled, stream too. A step
// costs step_cost + row_cost per decode row + token_cost per prompt token, a prompt token
// costing what a decode row does (the CPU's case). Every streaming session's gap between two
// tokens, in simulated time, must stay within twice what a step of the same decode batch costs
// without prompts, and every prompt must finish within the FCFS bound: the tokens ahead of it
// at arrival plus its own, at the least budget per step.
struct CostModel {
  double step_cost = 0.0;
  double row_cost = 1.0;
  double token_cost = 1.0;
  double Step(int64_t rows, int64_t tokens) const {
    return step_cost + row_cost * static_cast<double>(rows) +
           token_cost * static_cast<double>(tokens);
  }
};

struct FairnessResult {
  double worst_gap_ratio = 0.0;  // a stream's gap over the prompt-free step of its batch
  int64_t prompts_done = 0;
};

FairnessResult SimulateFairness(const SchedulerLimits& limits, const CostModel& cost, uint64_t seed,
                                int steps, int streams, int64_t prompt_tokens,
                                double arrival_rate) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  struct Sim {
    JobId id;
    int64_t remaining = 0;
    int64_t last_token_step = -1;
    double last_token_time = -1.0;
    int64_t arrival_step = 0;
    int64_t deadline_step = 0;  // prompts: the FCFS bound
    int64_t to_generate = 0;
  };
  std::vector<Sim> jobs;
  uint64_t next_id = 1;
  for (int i = 0; i < streams; ++i) {
    jobs.push_back({JobId{next_id++}, 0, 0, 0.0, 0, 0, std::numeric_limits<int64_t>::max()});
  }
  FairnessResult result;
  double now = 0.0;
  std::vector<JobView> views;
  StepPlan plan;
  for (int step = 1; step <= steps; ++step) {
    if (unit(rng) < arrival_rate) {
      int64_t ahead = prompt_tokens;
      for (const Sim& j : jobs) ahead += j.remaining;
      const int64_t bound = (ahead + limits.prefill_token_budget - 1) / limits.prefill_token_budget;
      jobs.push_back({JobId{next_id++}, prompt_tokens, -1, -1.0, step, step + bound, 16});
    }
    views.clear();
    for (const Sim& j : jobs) views.push_back({j.id, j.remaining, j.last_token_step});
    PlanStep(views, limits, plan);
    int64_t fed = 0;
    for (const PrefillChunk& chunk : plan.prefill) fed += chunk.tokens;
    const int64_t rows = std::ssize(plan.decode);
    const double step_time = cost.Step(rows, fed);
    now += step_time;
    std::set<JobId> decoded(plan.decode.begin(), plan.decode.end());
    std::map<JobId, int32_t> chunk_of;
    for (const PrefillChunk& chunk : plan.prefill) chunk_of[chunk.id] = chunk.tokens;
    for (Sim& j : jobs) {
      if (decoded.contains(j.id)) {
        if (j.last_token_time >= 0) {
          // Under the batch cap every stream decodes every step: its gap is this step.
          result.worst_gap_ratio =
              std::max(result.worst_gap_ratio, (now - j.last_token_time) / cost.Step(rows, 0));
        }
        j.last_token_step = step;
        j.last_token_time = now;
        --j.to_generate;
      } else if (auto it = chunk_of.find(j.id); it != chunk_of.end()) {
        j.remaining -= it->second;
        if (j.remaining == 0) {
          EXPECT_LE(step, j.deadline_step) << "prompt " << j.id.value << " arrived at step "
                                           << j.arrival_step << " finished late";
          ++result.prompts_done;
          j.last_token_step = step;
          j.last_token_time = now;
          --j.to_generate;
        }
      }
    }
    std::erase_if(jobs, [](const Sim& j) { return j.to_generate <= 0; });
  }
  return result;
}

TEST(SchedulerTest, NeighboursLongPromptsAtMostDoubleAStreamsInterTokenGap) {
  const SchedulerLimits limits = SchedulerDefaults(DeviceKind::kCpu);
  const FairnessResult r = SimulateFairness(limits, {}, /*seed=*/3, /*steps=*/20000,
                                            /*streams=*/32, /*prompt_tokens=*/8192,
                                            /*arrival_rate=*/0.01);
  EXPECT_GT(r.prompts_done, 20);
  EXPECT_GT(r.worst_gap_ratio, 1.5) << "the prompts should load the streams' steps";
  EXPECT_LE(r.worst_gap_ratio, 2.0);
}

TEST(SchedulerTest, NoPromptStarvesUnderAnyLoad) {
  // A fixed per-step overhead, a GPU-like cost (prompt tokens cheap next to decode rows), a
  // large batch cap and few streams, many streams past the cap: every prompt meets its bound.
  const CostModel gpu{.step_cost = 50, .row_cost = 1, .token_cost = 0.1};
  FairnessResult r =
      SimulateFairness(SchedulerDefaults(DeviceKind::kCuda), gpu, 4, 20000, 4, 3000, 0.05);
  EXPECT_GT(r.prompts_done, 100);
  SchedulerLimits small = {.max_batch_size = 8,
                           .prefill_token_budget = 16,
                           .prefill_tokens_per_decode_row = 0,
                           .idle_prefill_token_budget = 64};
  r = SimulateFairness(small, {}, 5, 20000, 40, 100, 0.1);
  EXPECT_GT(r.prompts_done, 100);
}

}  // namespace
}  // namespace linserve
