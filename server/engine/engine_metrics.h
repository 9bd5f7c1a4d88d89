// EngineMetrics: the engine's instruments in the metrics registry (docs/server.md lists them),
// and EngineStats, what the engine thread publishes after every loop iteration.
//
// The stores count their own events into the counters handed to them here (session_store(),
// prefix_store()); the engine counts its steps, tokens, generations and prefix reuse, and sets
// the gauges from what the stores hold (Publish).
#ifndef LINSERVE_SERVER_ENGINE_ENGINE_METRICS_H_
#define LINSERVE_SERVER_ENGINE_ENGINE_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/engine/token_sink.h"
#include "server/metrics/metrics.h"
#include "server/prefix/prefix_disk.h"
#include "server/prefix/prefix_store.h"
#include "server/sessions/session_store.h"
#include "server/sessions/turn_boundaries.h"

namespace linserve {

struct EngineStats {
  int32_t slot_capacity = 0;
  int32_t free_slots = 0;
  int32_t active_requests = 0;
  // Submitted requests not yet running plus session operations not yet run.
  int32_t queue_depth = 0;
  int32_t queued_requests = 0;
  int32_t resident_sessions = 0;
  int32_t hibernated_sessions = 0;
  int32_t ephemeral_sessions = 0;
};

class EngineMetrics {
 public:
  // Registers (or finds) every instrument in `registry`, which must outlive this.
  explicit EngineMetrics(MetricsRegistry& registry);
  EngineMetrics(const EngineMetrics&) = delete;
  EngineMetrics& operator=(const EngineMetrics&) = delete;

  // The counters each store counts its events into.
  SessionStoreCounters session_store() const;
  PrefixStoreCounters prefix_store() const;

  // A generation ended with `status` and, when that is OK, `reason`.
  void CountGeneration(const absl::Status& status, FinishReason reason);
  // A lookup found no usable prefix state.
  void CountPrefixMiss(PrefixMiss miss);
  // Sets the gauges from `stats` and from what the stores hold (`prefix_disk` nullptr: none).
  void Publish(const EngineStats& stats, const SessionStore& sessions, const PrefixStore& prefix,
               const PrefixDisk* prefix_disk, const TurnBoundaries& boundaries);

  Counter& steps;
  Counter& prompt_tokens;
  Counter& generated_tokens;
  Counter& expired_sessions;
  Histogram& batch_size;
  Histogram& prefill_chunk;
  Histogram& prefill_step;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Counter& prefix_hits;
  Counter& prefix_tokens_saved;
  Counter& prefix_checkpoints;
  Counter& tenant_max_queued_rejections;

 private:
  Counter& generations_length_;
  Counter& generations_stop_;
  Counter& generations_eos_;
  Counter& generations_cancelled_;
  Counter& generations_failed_;
  Counter& prefix_miss_no_prefix_;
  Counter& prefix_miss_evicted_;
  Counter& prefix_miss_too_short_;
  Counter& hibernations_;
  Counter& evictions_to_disk_;
  Counter& loads_from_disk_;
  Counter& tenant_max_sessions_rejections_;
  Counter& prefix_evictions_;
  Counter& prefix_disk_reads_;
  Gauge& queue_depth_;
  Gauge& active_requests_;
  Gauge& free_slots_;
  Gauge& slot_capacity_;
  Gauge& resident_sessions_;
  Gauge& hibernated_sessions_;
  Gauge& ephemeral_sessions_;
  Gauge& prefix_bytes_;
  Gauge& prefix_entries_;
  Gauge& turn_boundary_bytes_;
  Gauge& session_host_bytes_;
  Gauge& disk_sessions_;
  Gauge& prefix_disk_bytes_;
  Gauge& prefix_disk_states_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_ENGINE_METRICS_H_
