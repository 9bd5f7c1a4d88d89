#include "server/engine/engine_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace linserve {

absl::Status ValidateEngineOptions(const EngineOptions& options) {
  if (absl::Status s = ValidateSchedulerLimits(options.scheduler); !s.ok()) return s;
  if (absl::Status s = ValidateSessionStoreOptions(options.sessions); !s.ok()) return s;
  if (absl::Status s = ValidateRequestLimits(options.requests); !s.ok()) return s;
  if (absl::Status s = ValidatePrefixStoreOptions(options.prefix); !s.ok()) return s;
  if (absl::Status s = ValidateTurnBoundaryOptions(options.turn_boundaries); !s.ok()) return s;
  if (absl::Status s = ValidateConstraintLimits(options.constraint_limits); !s.ok()) return s;
  if (options.max_queue_depth < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_depth must be >= 1, got ", options.max_queue_depth));
  }
  if (options.emitter_threads < 0 || options.emitter_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("emitter_threads must be in [0, 64], got ", options.emitter_threads));
  }
  if (options.tenant_max_queued < 0 || options.tenant_max_queued > options.max_queue_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant_max_queued must be in [0, max_queue_depth = ", options.max_queue_depth,
                     "] (0: max_queue_depth alone), got ", options.tenant_max_queued));
  }
  return absl::OkStatus();
}

void ApplyFairTenantShares(int32_t tenants, EngineOptions& options) {
  if (tenants <= 1) return;
  const auto share = [tenants](auto limit) -> decltype(limit) {
    return limit == 0 ? 0 : std::max<decltype(limit)>(1, limit / tenants);
  };
  int32_t& sessions = options.sessions.tenant_max_sessions;
  if (sessions == 0) sessions = share(options.sessions.max_sessions);
  if (options.tenant_max_queued == 0) options.tenant_max_queued = share(options.max_queue_depth);
  int64_t& prefix = options.prefix.tenant_budget_bytes;
  if (prefix == 0) prefix = share(options.prefix.memory_budget_bytes);
  int64_t& boundaries = options.turn_boundaries.tenant_budget_bytes;
  if (boundaries == 0) boundaries = share(options.turn_boundaries.memory_budget_bytes);
}

}  // namespace linserve
