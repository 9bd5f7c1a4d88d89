// EngineOptions: what an Engine is configured with (engine.h), its validation and the tenant
// quotas' fair shares.
#ifndef LINSERVE_SERVER_ENGINE_ENGINE_OPTIONS_H_
#define LINSERVE_SERVER_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/constraints/constraint_spec.h"
#include "server/engine/request.h"
#include "server/engine/scheduler.h"
#include "server/prefix/prefix_store.h"
#include "server/sessions/session_store.h"
#include "server/sessions/turn_boundaries.h"
#include "server/storage/file_system.h"

namespace linserve {

struct EngineOptions {
  // Decode batch cap and the per-step prefill budgets. Default: see SchedulerLimits (the CPU's
  // values; SchedulerDefaults has each device's).
  SchedulerLimits scheduler;
  // Session count and idle expiry. Default: see SessionStoreOptions.
  SessionStoreOptions sessions;
  // Per-request limits. Default: see RequestLimits.
  RequestLimits requests;
  // Prefix reuse: budget, checkpoint interval. Default: see PrefixStoreOptions.
  PrefixStoreOptions prefix;
  // Turn boundaries kept for RewindSession and ForkSessionAt. Default: see
  // TurnBoundaryOptions.
  TurnBoundaryOptions turn_boundaries;
  // Structured output: what compiling and matching a constraint may cost, and the compiled
  // constraints the engine's ConstraintCache keeps. Default: see ConstraintLimits.
  ConstraintLimits constraint_limits;
  // Work waiting for the engine thread: submitted requests not yet running (including those
  // waiting for a free state slot) plus session operations not yet run. Beyond it Submit and
  // the session operations fail at once with RESOURCE_EXHAUSTED. Default: 256.
  int32_t max_queue_depth = 256;
  // The share of max_queue_depth one tenant may fill: its requests not yet running plus its
  // session operations not yet run. Beyond it that tenant's Submit and session operations fail
  // at once with RESOURCE_EXHAUSTED naming tenant_max_queued; other tenants' are not affected.
  // 0: no quota of its own (max_queue_depth alone applies). In [0, max_queue_depth].
  // Default: 0.
  int32_t tenant_max_queued = 0;
  // Where sessions persist (session_persister.h): every change of a named session is written
  // behind, and its client hears that a request, create, fork, import, export or delete is
  // done only once the change is on disk; Create restores them. "" keeps sessions in memory
  // only. Default: "".
  std::string state_dir;
  // Threads that hand requests' output to their TokenSinks (emitter.h), so that the engine
  // thread never waits on a client's stream; each request's calls on one of them, in order.
  // 0 runs them on the engine thread. In [0, 64]. Default: 2.
  int32_t emitter_threads = 2;
  // Least time between two batches of session writes. Default: 2 ms.
  absl::Duration state_write_interval = absl::Milliseconds(2);
  // The file system under state_dir; nullptr means DefaultFileSystem(). Must outlive the
  // engine. Default: nullptr.
  FileSystem* file_system = nullptr;
};

// Errors are INVALID_ARGUMENT naming the option and its range.
absl::Status ValidateEngineOptions(const EngineOptions& options);

// Fills each tenant quota left at 0 in `options` (sessions.tenant_max_sessions,
// tenant_max_queued, prefix.tenant_budget_bytes, turn_boundaries.tenant_budget_bytes) with
// a fair share of its global limit among `tenants` known tenants: the limit divided by
// `tenants`, rounded down, at least 1 (0 for a limit of 0), so that the shares add up to at most
// the limit and no tenant can take another's share. With at most one tenant they stay 0: the
// global limits alone, as without tenants.
void ApplyFairTenantShares(int32_t tenants, EngineOptions& options);

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_ENGINE_OPTIONS_H_
