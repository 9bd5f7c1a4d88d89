// PrefixPlanner: how the engine's steps use the prefix store (prefix_store.h): where a job's
// prefill starts (the longest cached prefix of its tokens), where its chunks end (the
// positions a prefix state is stored at), and which jobs wait for another's prefix state
// rather than feeding a shared prefix too.
//
// Prefix states are stored inside a prompt at every checkpoint_interval-th position and at the
// prompt's last token but one (a resent prompt must feed at least its last token for the first
// logits), for jobs that know their history; a prefill chunk ends at the next such position
// (the rest goes in the next step), and the state is read after the batch, asynchronously
// (SlotReads): it enters the store when it lands, and every read lands before a lookup. Another
// is stored at each turn boundary (Engine::Complete).
//
// Prompts that share a prefix arrive together (a system prompt, a resent conversation): the
// first one feeds it and the others wait for its prefix state rather than feeding it too. A job
// that has fed nothing waits while a prefill leader (a job of the same tenant feeding its
// prompt, collected in admission order) will store a prefix state of at least min_tokens inside
// the prefix they share and has not reached it yet; a job that does not wait becomes a leader.
// A waiting job is not offered to the scheduler, so the step's budget goes to the others.
// Nothing waits on a waiting job, and a leader only moves on (or ends, cancelled or failed, and
// stops being one), so every job is offered again.
//
// No threads and no locking: the engine thread owns it.
#ifndef LINSERVE_SERVER_ENGINE_PREFIX_PLANNER_H_
#define LINSERVE_SERVER_ENGINE_PREFIX_PLANNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "model/backend/backend.h"
#include "server/engine/engine_metrics.h"
#include "server/engine/job.h"
#include "server/engine/slot_reads.h"
#include "server/prefix/prefix_store.h"

namespace linserve {

class PrefixPlanner {
 public:
  // All four must outlive the planner.
  PrefixPlanner(PrefixStore& store, Backend& backend, SlotReads& reads, EngineMetrics& metrics);
  PrefixPlanner(const PrefixPlanner&) = delete;
  PrefixPlanner& operator=(const PrefixPlanner&) = delete;

  // At the start of a step: the leaders are the `active` jobs already feeding their prompt.
  void BeginStep(const std::vector<std::unique_ptr<Job>>& active);
  // Whether `job` waits for a leader's prefix state this step (it becomes a leader if not).
  bool WaitsForPrefix(const Job& job);
  // Before a job's first prefill chunk: when its session was empty, starts it from the longest
  // cached prefix of its tokens (copied into the job's own slot; prefill starts after it).
  // Errors are the backend's.
  absl::Status Reuse(Job& job);
  // Tokens the job may feed before its next prefix-state position (at least 1).
  int64_t NextCheckpoint(const Job& job) const;
  // Whether a prefix state is stored when `job` has consumed its first `position` tokens.
  bool IsCheckpoint(const Job& job, int64_t position) const;
  // Stores the state of the job's slot, which has consumed its first `position` tokens, unless
  // the store holds that prefix state already: starts its read, and stores it once it lands.
  void Checkpoint(Job& job, SlotId slot, int64_t position);

 private:
  // The last position at most `limit` at which `leader` stores a prefix state (IsCheckpoint),
  // or a position below min_tokens when there is none.
  int64_t LastCheckpointAtOrBefore(const Job& leader, int64_t limit) const;

  PrefixStore& store_;
  Backend& backend_;
  SlotReads& reads_;
  EngineMetrics& metrics_;
  // This step's prefill leaders, in admission order.
  std::vector<const Job*> leaders_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_PREFIX_PLANNER_H_
