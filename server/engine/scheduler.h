// The scheduler: a pure function from the engine's active jobs to what one step runs.
//
// Continuous batching with chunked prefill. Every step decodes every decoding job (oldest-served
// first when there are more than max_batch_size of them, so none starves), and feeds prompt
// tokens first-come first-served, split into per-job chunks that the engine hands to the
// backend as one batched call (Backend::PrefillBatch). How many depends on the load:
//  - while jobs are decoding, a step feeds at most
//      max(prefill_token_budget, prefill_tokens_per_decode_row × jobs decoded in the step)
//    prompt tokens, so the prompt work a streaming session waits for between two tokens is
//    bounded by a floor or by a multiple of the decode work it waits for anyway;
//  - with nothing to decode, nobody waits for a token: a step feeds up to
//    idle_prefill_token_budget tokens, and long prompts go at the backend's full speed.
// The earliest admitted prompt is fed every step, so every prompt finishes.
#ifndef LINSERVE_SERVER_ENGINE_SCHEDULER_H_
#define LINSERVE_SERVER_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "server/engine/job_id.h"

namespace linserve {

struct SchedulerLimits {
  // Most jobs decoded in one step (one decode batch), and most prompts fed in one step (one
  // Backend::PrefillBatch call); at most the backend's BackendOptions::max_batch_size.
  // Default: 64.
  int32_t max_batch_size = 64;
  // While jobs decode, the least prompt budget of a step: a streaming session's next token
  // waits for at most this many prompt tokens (or the share below), and the earliest prompt
  // gets at least this many per step. Default: 32 (SchedulerDefaults has the per-device ones).
  int32_t prefill_token_budget = 32;
  // While jobs decode, a step's prompt budget grows to this many tokens per job decoded in it,
  // so that the prompt work a step adds stays in proportion to its decode work: at about the
  // cost of a prompt token per decode row, 1 at most doubles a streaming session's inter-token
  // gap. 0: the budget is prefill_token_budget whatever the batch. Default: 1.
  int32_t prefill_tokens_per_decode_row = 1;
  // Most prompt tokens fed in a step with no job to decode; >= prefill_token_budget. Large, so
  // that a long prompt is fed in few large batched calls at the backend's full speed; a request
  // arriving meanwhile waits for at most one such step. Default: 2048.
  int32_t idle_prefill_token_budget = 2048;
};

// The limits that suit `device` (max_batch_size left at its default): on the CPU a prompt token
// costs about what a decode row does, so a step adds at most its decode work in prompt tokens;
// on a GPU a decode step is bound by reading the weights and states, so a few hundred prompt
// tokens cost about as much as one decode step, and the idle budget fills several of the
// backend's 2048-row passes.
SchedulerLimits SchedulerDefaults(DeviceKind device);

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

// The prompt tokens a step that decodes `decode_rows` jobs may feed (see SchedulerLimits).
int64_t PrefillBudget(const SchedulerLimits& limits, int64_t decode_rows);

// `jobs` in admission order (earliest first); ids distinct. Guarantees:
//  - decode holds min(#decoding, max_batch_size) jobs, those with the smallest
//    last_token_step (ties: earliest admitted). A job is passed over only for jobs served no
//    later than it, each at most once, so it waits at most ceil(#decoding / max_batch_size)
//    steps for its next token;
//  - prefill goes to the earliest admitted prefilling jobs, at most max_batch_size of them,
//    each chunk at most that job's remaining tokens, every chunk but the last all of them, and
//    the chunks sum to min(PrefillBudget(limits, decode.size()), those jobs' remaining tokens);
//  - no job is both decoded and prefilled.
// Writes the plan into `plan`, replacing what it held.
void PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits, StepPlan& plan);
StepPlan PlanStep(absl::Span<const JobView> jobs, const SchedulerLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SCHEDULER_H_
