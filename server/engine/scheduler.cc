#include "server/engine/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linserve {

absl::Status ValidateSchedulerLimits(const SchedulerLimits& limits) {
  if (limits.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler max_batch_size must be >= 1, got ", limits.max_batch_size));
  }
  if (limits.prefill_token_budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler prefill_token_budget must be >= 1, got ", limits.prefill_token_budget));
  }
  return absl::OkStatus();
}

StepPlan PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits) {
  StepPlan plan;

  std::vector<size_t> decoding;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].prefill_remaining == 0) decoding.push_back(i);
  }
  if (decoding.size() > static_cast<size_t>(limits.max_batch_size)) {
    // Least recently served first; stable, so ties keep admission order.
    std::stable_sort(decoding.begin(), decoding.end(), [&](size_t a, size_t b) {
      return jobs[a].last_token_step < jobs[b].last_token_step;
    });
    decoding.resize(limits.max_batch_size);
    std::sort(decoding.begin(), decoding.end());
  }
  plan.decode.reserve(decoding.size());
  for (size_t i : decoding) plan.decode.push_back(jobs[i].id);

  int64_t budget = limits.prefill_token_budget;
  for (const JobView& job : jobs) {
    if (budget == 0) break;
    if (job.prefill_remaining == 0) continue;
    const int64_t tokens = std::min(job.prefill_remaining, budget);
    plan.prefill.push_back({job.id, static_cast<int32_t>(tokens)});
    budget -= tokens;
  }
  return plan;
}

}  // namespace linserve
