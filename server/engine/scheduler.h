// The scheduler: a pure function from the engine's active jobs to what one step runs.
//
// Continuous batching with chunked prefill. Every step decodes every decoding job (oldest-served
// first when there are more than max_batch_size of them, so none starves), and feeds at most
// prefill_token_budget prompt tokens, first-come first-served, split into per-job chunks. A
// step's cost is therefore bounded by one decode batch plus one budget of prompt tokens: a long
// prompt delays decoding sessions by at most one budgeted chunk per step, and it makes progress
// every step.
#ifndef LINSERVE_SERVER_ENGINE_SCHEDULER_H_
#define LINSERVE_SERVER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/engine/job_id.h"

namespace linserve {

struct SchedulerLimits {
  // Most jobs decoded in one step (one Backend::Decode call); at most the backend's
  // BackendOptions::max_batch_size. Default: 64.
  int32_t max_batch_size = 64;
  // Most prompt tokens fed in one step, over all prefilling jobs. Default: 256.
  int32_t prefill_token_budget = 256;
};

// Errors name the field and its range.
absl::Status ValidateSchedulerLimits(const SchedulerLimits& limits);

// The scheduler's view of one active job (one that holds a state slot).
struct JobView {
  JobId id;
  // Prompt tokens not yet fed; 0 means the job is decoding (it has a sampled token to feed).
  int64_t prefill_remaining = 0;
  // The step at which the job last got a token (a decode, or the end of its prefill); the
  // least recently served decode first.
  int64_t last_token_step = -1;
};

struct PrefillChunk {
  JobId id;
  int32_t tokens = 0;  // in [1, prefill_remaining]
};

struct StepPlan {
  // Decoding jobs to run as one batch, in the order given to PlanStep.
  std::vector<JobId> decode;
  // Prompt chunks to feed this step, in the order given to PlanStep.
  std::vector<PrefillChunk> prefill;
  // PlanStep's working space, kept so that a reused plan allocates nothing once warm.
  std::vector<size_t> scratch;
};

// `jobs` in admission order (earliest first); ids distinct. Guarantees:
//  - decode holds min(#decoding, max_batch_size) jobs, those with the smallest
//    last_token_step (ties: earliest admitted). A job is passed over only for jobs served no
//    later than it, each at most once, so it waits at most ceil(#decoding / max_batch_size)
//    steps for its next token;
//  - prefill chunks sum to min(prefill_token_budget, total prefill_remaining) and go to the
//    earliest admitted prefilling jobs, each chunk at most that job's remaining tokens;
//  - no job is both decoded and prefilled.
// Writes the plan into `plan`, replacing what it held.
void PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits, StepPlan& plan);
StepPlan PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SCHEDULER_H_
