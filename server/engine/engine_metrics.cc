#include "server/engine/engine_metrics.h"

#include <vector>

namespace linserve {
namespace {

std::vector<double> LatencyBuckets() { return ExponentialBuckets(0.0005, 2, 18); }  // 0.5 ms..65 s
std::vector<double> SizeBuckets() { return ExponentialBuckets(1, 2, 14); }          // 1..8192

constexpr char kGenerations[] = "Generations by outcome";
constexpr char kPrefixMisses[] =
    "Requests that could use a cached prefix and found none, by reason";
constexpr char kSessions[] = "Sessions by residency";
constexpr char kTenantQuota[] = "Calls refused because their tenant reached its quota, by quota";

}  // namespace

EngineMetrics::EngineMetrics(MetricsRegistry& r)
    : steps(r.GetCounter("linserve_engine_steps_total",
                         "Engine steps that ran the model (one decode batch and/or prefill "
                         "chunks)")),
      prompt_tokens(r.GetCounter("linserve_prompt_tokens_total",
                                 "Prompt tokens of requests, BOS included (cached prefix tokens "
                                 "too: see linserve_prefix_tokens_saved_total)")),
      generated_tokens(
          r.GetCounter("linserve_generated_tokens_total", "Tokens sampled and sent to clients")),
      expired_sessions(r.GetCounter("linserve_sessions_expired_total",
                                    "Sessions deleted after the idle timeout")),
      batch_size(r.GetHistogram("linserve_decode_batch_size", "Sessions per decode step",
                                SizeBuckets())),
      prefill_chunk(r.GetHistogram("linserve_prefill_chunk_tokens",
                                   "Prompt tokens per prefill chunk (one session's share of a "
                                   "step)",
                                   SizeBuckets())),
      prefill_step(r.GetHistogram("linserve_prefill_step_tokens",
                                  "Prompt tokens per engine step that fed any (one batched "
                                  "prefill)",
                                  SizeBuckets())),
      time_to_first_token(r.GetHistogram("linserve_time_to_first_token_seconds",
                                         "From accepting a request to its first sampled token",
                                         LatencyBuckets())),
      inter_token_latency(r.GetHistogram("linserve_inter_token_latency_seconds",
                                         "Between consecutive tokens of one request",
                                         LatencyBuckets())),
      prefix_hits(r.GetCounter("linserve_prefix_hits_total",
                               "Requests started from a cached prefix state")),
      prefix_tokens_saved(r.GetCounter("linserve_prefix_tokens_saved_total",
                                       "Prompt tokens not re-read thanks to cached prefix states")),
      prefix_checkpoints(r.GetCounter("linserve_prefix_checkpoints_total",
                                      "Prefix states stored (turn boundaries and inside long "
                                      "prefills)")),
      tenant_max_queued_rejections(r.GetCounter("linserve_tenant_quota_rejections_total",
                                                kTenantQuota,
                                                {{"quota", "tenant_max_queued"}})),
      generations_length_(
          r.GetCounter("linserve_generations_total", kGenerations, {{"outcome", "length"}})),
      generations_stop_(
          r.GetCounter("linserve_generations_total", kGenerations, {{"outcome", "stop"}})),
      generations_eos_(
          r.GetCounter("linserve_generations_total", kGenerations, {{"outcome", "eos"}})),
      generations_cancelled_(
          r.GetCounter("linserve_generations_total", kGenerations, {{"outcome", "cancelled"}})),
      generations_failed_(
          r.GetCounter("linserve_generations_total", kGenerations, {{"outcome", "error"}})),
      prefix_miss_no_prefix_(r.GetCounter("linserve_prefix_misses_total", kPrefixMisses,
                                          {{"reason", "no_prefix"}})),
      prefix_miss_evicted_(
          r.GetCounter("linserve_prefix_misses_total", kPrefixMisses, {{"reason", "evicted"}})),
      prefix_miss_too_short_(r.GetCounter("linserve_prefix_misses_total", kPrefixMisses,
                                          {{"reason", "too_short"}})),
      hibernations_(r.GetCounter("linserve_session_hibernations_total",
                                 "Sessions moved from a state slot to host memory to free the "
                                 "slot")),
      evictions_to_disk_(r.GetCounter("linserve_session_evictions_to_disk_total",
                                      "Idle sessions moved from host memory to disk "
                                      "(--host_state_memory_mib), their files already written")),
      loads_from_disk_(r.GetCounter("linserve_session_loads_from_disk_total",
                                    "Sessions read back from state_dir: used after an eviction, "
                                    "or written by another server sharing the directory")),
      tenant_max_sessions_rejections_(r.GetCounter("linserve_tenant_quota_rejections_total",
                                                   kTenantQuota,
                                                   {{"quota", "tenant_max_sessions"}})),
      prefix_evictions_(r.GetCounter("linserve_prefix_evictions_total",
                                     "Prefix states evicted for the memory budget")),
      prefix_disk_reads_(r.GetCounter("linserve_prefix_disk_reads_total",
                                      "Prefix states read back from the disk tier by a lookup")),
      queue_depth_(r.GetGauge("linserve_queue_depth",
                              "Requests and session operations waiting for the engine")),
      active_requests_(
          r.GetGauge("linserve_active_requests", "Generations holding a state slot")),
      free_slots_(r.GetGauge("linserve_free_slots", "Free state slots")),
      slot_capacity_(r.GetGauge("linserve_slot_capacity", "State slots in the pool")),
      resident_sessions_(r.GetGauge("linserve_sessions", kSessions, {{"state", "resident"}})),
      hibernated_sessions_(r.GetGauge("linserve_sessions", kSessions, {{"state", "hibernated"}})),
      ephemeral_sessions_(r.GetGauge("linserve_sessions", kSessions, {{"state", "ephemeral"}})),
      prefix_bytes_(
          r.GetGauge("linserve_prefix_bytes", "Host memory held by cached prefix states")),
      prefix_entries_(r.GetGauge("linserve_prefix_states", "Cached prefix states")),
      turn_boundary_bytes_(r.GetGauge("linserve_session_checkpoint_bytes",
                                      "Host memory held by sessions' turn boundaries "
                                      "(RewindSession)")),
      session_host_bytes_(r.GetGauge("linserve_session_host_memory_bytes",
                                     "Host memory charged for sessions out of their slots "
                                     "(--host_state_memory_mib)")),
      disk_sessions_(r.GetGauge("linserve_sessions_on_disk",
                                "Hibernated sessions held only on disk (an index entry in "
                                "memory)")),
      prefix_disk_bytes_(r.GetGauge("linserve_prefix_disk_bytes",
                                    "Bytes of prefix states on the disk tier (--prefix_disk_dir)")),
      prefix_disk_states_(
          r.GetGauge("linserve_prefix_disk_states", "Prefix states on the disk tier")) {}

SessionStoreCounters EngineMetrics::session_store() const {
  return {.hibernations = &hibernations_,
          .evictions_to_disk = &evictions_to_disk_,
          .loads_from_disk = &loads_from_disk_,
          .tenant_quota_rejections = &tenant_max_sessions_rejections_};
}

PrefixStoreCounters EngineMetrics::prefix_store() const {
  return {.evictions = &prefix_evictions_, .disk_reads = &prefix_disk_reads_};
}

void EngineMetrics::CountGeneration(const absl::Status& status, FinishReason reason) {
  if (!status.ok()) {
    (absl::IsCancelled(status) ? generations_cancelled_ : generations_failed_).Increment();
    return;
  }
  switch (reason) {
    case FinishReason::kLength:
      generations_length_.Increment();
      break;
    case FinishReason::kStop:
    case FinishReason::kConstraintComplete:
      generations_stop_.Increment();
      break;
    case FinishReason::kEos:
      generations_eos_.Increment();
      break;
    case FinishReason::kCancelled:
      generations_cancelled_.Increment();
      break;
    case FinishReason::kError:
      generations_failed_.Increment();
      break;
  }
}

void EngineMetrics::CountPrefixMiss(PrefixMiss miss) {
  switch (miss) {
    case PrefixMiss::kNoPrefix:
      prefix_miss_no_prefix_.Increment();
      break;
    case PrefixMiss::kEvicted:
      prefix_miss_evicted_.Increment();
      break;
    case PrefixMiss::kTooShort:
      prefix_miss_too_short_.Increment();
      break;
  }
}

void EngineMetrics::Publish(const EngineStats& stats, const SessionStore& sessions,
                            const PrefixStore& prefix, const PrefixDisk* prefix_disk,
                            const TurnBoundaries& boundaries) {
  queue_depth_.Set(stats.queue_depth);
  active_requests_.Set(stats.active_requests);
  free_slots_.Set(stats.free_slots);
  slot_capacity_.Set(stats.slot_capacity);
  resident_sessions_.Set(stats.resident_sessions);
  hibernated_sessions_.Set(stats.hibernated_sessions);
  ephemeral_sessions_.Set(stats.ephemeral_sessions);
  prefix_bytes_.Set(static_cast<double>(prefix.bytes()));
  prefix_entries_.Set(static_cast<double>(prefix.size()));
  turn_boundary_bytes_.Set(static_cast<double>(boundaries.bytes()));
  session_host_bytes_.Set(static_cast<double>(sessions.host_bytes()));
  disk_sessions_.Set(sessions.disk_sessions());
  if (prefix_disk != nullptr) {
    prefix_disk_bytes_.Set(static_cast<double>(prefix_disk->bytes()));
    prefix_disk_states_.Set(static_cast<double>(prefix_disk->size()));
  }
}

}  // namespace linserve
