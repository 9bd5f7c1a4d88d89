#include "server/engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linserve {

SchedulerLimits SchedulerDefaults(DeviceKind device) {
  SchedulerLimits limits;
  switch (device) {
    case DeviceKind::kCpu:
      limits.prefill_token_budget = 32;
      limits.prefill_tokens_per_decode_row = 1;
      limits.idle_prefill_token_budget = 2048;
      break;
    case DeviceKind::kCuda:
      limits.prefill_token_budget = 256;
      limits.prefill_tokens_per_decode_row = 8;
      limits.idle_prefill_token_budget = 8192;
      break;
  }
  return limits;
}

absl::Status ValidateSchedulerLimits(const SchedulerLimits& limits) {
  if (limits.max_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler max_batch_size must be >= 1, got ", limits.max_batch_size));
  }
  if (limits.prefill_token_budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler prefill_token_budget must be >= 1, got ", limits.prefill_token_budget));
  }
  if (limits.prefill_tokens_per_decode_row < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler prefill_tokens_per_decode_row must be >= 0, got ",
                     limits.prefill_tokens_per_decode_row));
  }
  if (limits.idle_prefill_token_budget < limits.prefill_token_budget) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler idle_prefill_token_budget must be >= prefill_token_budget (",
                     limits.prefill_token_budget, "), got ", limits.idle_prefill_token_budget));
  }
  return absl::OkStatus();
}

int64_t PrefillBudget(const SchedulerLimits& limits, int64_t decode_rows) {
  if (decode_rows == 0) return limits.idle_prefill_token_budget;
  return std::max<int64_t>(limits.prefill_token_budget,
                           int64_t{limits.prefill_tokens_per_decode_row} * decode_rows);
}

void PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits, StepPlan& plan) {
  plan.decode.clear();
  plan.prefill.clear();
  std::vector<size_t>& decoding = plan.scratch;
  decoding.clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].prefill_remaining == 0) decoding.push_back(i);
  }
  if (decoding.size() > static_cast<size_t>(limits.max_batch_size)) {
    // Least recently served first; ties keep admission order (the index breaks them, which
    // std::stable_sort would do with a temporary buffer).
    std::sort(decoding.begin(), decoding.end(), [&](size_t a, size_t b) {
      return jobs[a].last_token_step != jobs[b].last_token_step
                 ? jobs[a].last_token_step < jobs[b].last_token_step
                 : a < b;
    });
    decoding.resize(limits.max_batch_size);
    std::sort(decoding.begin(), decoding.end());
  }
  for (size_t i : decoding) plan.decode.push_back(jobs[i].id);

  int64_t budget = PrefillBudget(limits, static_cast<int64_t>(plan.decode.size()));
  for (const JobView& job : jobs) {
    if (budget == 0 || plan.prefill.size() == static_cast<size_t>(limits.max_batch_size)) break;
    if (job.prefill_remaining == 0) continue;
    const int64_t tokens = std::min(job.prefill_remaining, budget);
    plan.prefill.push_back({job.id, static_cast<int32_t>(tokens)});
    budget -= tokens;
  }
}

StepPlan PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits) {
  StepPlan plan;
  PlanStep(jobs, limits, plan);
  return plan;
}

}  // namespace linserve
