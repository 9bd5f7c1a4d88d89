#include "server/engine/prefix_planner.h"

#include <algorithm>
#include <utility>

#include "spdlog/spdlog.h"

namespace linserve {

PrefixPlanner::PrefixPlanner(PrefixStore& store, Backend& backend, SlotReads& reads,
                             EngineMetrics& metrics)
    : store_(store), backend_(backend), reads_(reads), metrics_(metrics) {}

void PrefixPlanner::BeginStep(const std::vector<std::unique_ptr<Job>>& active) {
  leaders_.clear();
  if (!store_.enabled()) return;
  for (const auto& job : active) {
    const int64_t remaining = job->prefill_remaining();
    if (job->knows_history() && remaining > 0 &&
        remaining < static_cast<int64_t>(job->feed().size())) {
      leaders_.push_back(job.get());
    }
  }
}

absl::Status PrefixPlanner::Reuse(Job& job) {
  if (!store_.enabled() || !job.knows_history()) return absl::OkStatus();
  reads_.Land(/*wait=*/true);  // the checkpoints read so far are in the store
  const PrefixLookup found = store_.Lookup(job.request().tenant, job.feed());
  if (found.state == nullptr) {
    metrics_.CountPrefixMiss(*found.miss);
    return absl::OkStatus();
  }
  const SlotId slot = *job.session()->slot;
  if (absl::Status s = backend_.WriteSlot(slot, *found.state); !s.ok()) return s;
  // Writing a slot clears its sampling state: the job's parameters and its prompt's counts
  // again, exactly as admission set them on the empty slot.
  const GenerateRequest& request = job.request();
  if (absl::Status s = backend_.StartSampling(slot, request.sampling, request.top_logprobs,
                                              job.new_prompt_tokens());
      !s.ok()) {
    return s;
  }
  job.SkipPrefill(found.length);
  metrics_.prefix_hits.Increment();
  metrics_.prefix_tokens_saved.Increment(static_cast<double>(found.length));
  return absl::OkStatus();
}

bool PrefixPlanner::IsCheckpoint(const Job& job, int64_t position) const {
  if (!store_.enabled() || !job.knows_history() || position < store_.options().min_tokens) {
    return false;
  }
  const int64_t every = store_.options().checkpoint_interval;
  return position == static_cast<int64_t>(job.feed().size()) - 1 ||
         (every > 0 && position % every == 0 &&
          position < static_cast<int64_t>(job.feed().size()));
}

int64_t PrefixPlanner::NextCheckpoint(const Job& job) const {
  const int64_t remaining = job.prefill_remaining();
  if (!store_.enabled() || !job.knows_history()) return remaining;
  const int64_t end = static_cast<int64_t>(job.feed().size());
  const int64_t start = end - remaining;
  // Only positions a prefix state is stored at (IsCheckpoint) end a chunk early.
  const int64_t first = std::max<int64_t>(start + 1, store_.options().min_tokens);
  int64_t stop = end;
  if (end - 1 >= first) stop = end - 1;
  if (const int64_t every = store_.options().checkpoint_interval; every > 0) {
    stop = std::min(stop, (first + every - 1) / every * every);
  }
  return std::max<int64_t>(stop - start, 1);
}

bool PrefixPlanner::WaitsForPrefix(const Job& job) {
  const int64_t size = static_cast<int64_t>(job.feed().size());
  // A job that scores its prompt or starts from a forked state never uses a cached prefix.
  if (!store_.enabled() || !job.knows_history() || job.prefill_remaining() != size ||
      size == 0 || job.scores_prompt() || job.forked()) {
    return false;
  }
  for (const Job* leader : leaders_) {
    if (leader->request().tenant != job.request().tenant) continue;
    const absl::Span<const TokenId> mine = job.feed();
    const absl::Span<const TokenId> theirs = leader->feed();
    const size_t common = static_cast<size_t>(
        std::mismatch(mine.begin(), mine.begin() + std::min(mine.size(), theirs.size()),
                      theirs.begin())
            .first -
        mine.begin());
    // A prefix state this job can start from leaves it at least its last token to feed.
    const int64_t wanted = LastCheckpointAtOrBefore(
        *leader, std::min<int64_t>(static_cast<int64_t>(common), size - 1));
    const int64_t fed = static_cast<int64_t>(theirs.size()) - leader->prefill_remaining();
    if (wanted >= store_.options().min_tokens && fed < wanted) return true;
  }
  leaders_.push_back(&job);
  return false;
}

int64_t PrefixPlanner::LastCheckpointAtOrBefore(const Job& leader, int64_t limit) const {
  const int64_t last = static_cast<int64_t>(leader.feed().size()) - 1;
  if (limit >= last) return last;
  const int64_t every = store_.options().checkpoint_interval;
  return every > 0 ? limit / every * every : 0;
}

void PrefixPlanner::Checkpoint(Job& job, SlotId slot, int64_t position) {
  if (position < store_.options().min_tokens) return;
  std::vector<TokenId> tokens = job.History(position);
  if (store_.Touch(job.request().tenant, tokens)) return;
  reads_.Start(slot, [this, tenant = job.request().tenant, tokens = std::move(tokens),
                      request_id = job.request().request_id](
                         absl::StatusOr<StateBlob> state) mutable {
    if (!state.ok()) {
      spdlog::error("request {}: reading a prefix checkpoint failed: {}", request_id,
                    state.status().ToString());
      return;
    }
    if (store_.Insert(tenant, tokens, *std::move(state))) metrics_.prefix_checkpoints.Increment();
  });
}

}  // namespace linserve
