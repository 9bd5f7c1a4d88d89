// What a load test measured: one record per RPC, and the report built from them.
#ifndef LINSERVE_CLIENT_LOADTEST_LOAD_REPORT_H_
#define LINSERVE_CLIENT_LOADTEST_LOAD_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/loadtest/latency_summary.h"
#include "nlohmann/json.hpp"

namespace linserve::loadtest {

// One Generate call. Times are seconds since the start of the run (steady clock).
struct GenerateRecord {
  // Started after the warm-up ended: only these count in the report's figures.
  bool measured = false;
  double start_s = 0;
  // When the first message carrying a token arrived; < 0 when none did.
  double first_token_s = -1;
  double end_s = 0;
  // Tokens received (GeneratedToken messages), and the prompt tokens the server reported in
  // the final Usage (0 when the call failed before it).
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  // Of prompt_tokens, those the server did not re-read (a cached prefix).
  int64_t cached_prompt_tokens = 0;
  // Gaps between consecutive tokens, in seconds: output_tokens - 1 of them. A message
  // carrying k tokens (the server merges tokens for a slow reader) contributes k gaps of (its
  // gap to the previous message) / k; the first message's k - 1 extra tokens count as 0.
  std::vector<double> inter_token_s;
  absl::StatusCode code = absl::StatusCode::kOk;
};

// One session RPC of the multi-turn workload: "create", "fork", "export" or "delete".
struct OperationRecord {
  std::string op;
  bool measured = false;
  double latency_s = 0;
  // Bytes of the snapshot ("export" only).
  int64_t bytes = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
};

struct OperationStats {
  int64_t ok = 0;
  int64_t failed = 0;
  LatencySummary latency_ms;
  // Mean snapshot size ("export" only).
  double mean_bytes = 0;
};

struct LoadReport {
  // The run's settings as given (flag name -> value), echoed into both outputs.
  std::vector<std::pair<std::string, std::string>> settings;

  // Throughput over the measurement window, from the end of the warm-up to the moment the
  // bound stopped new work (the drain of calls still in flight is left out): every token and
  // completion inside it counts, whichever request it belongs to, so that long requests
  // straddling the window's edges neither inflate nor deflate the rates.
  double measured_seconds = 0;
  int64_t output_tokens = 0;       // received inside the window
  double output_tokens_per_second = 0;
  double requests_per_second = 0;  // successful completions inside the window

  // Per-request figures over the measured requests (started after the warm-up), including
  // those that finished during the drain.
  int64_t requests_ok = 0;
  int64_t requests_failed = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  LatencySummary time_to_first_token_ms;
  LatencySummary inter_token_latency_ms;
  LatencySummary end_to_end_ms;
  // Failed measured calls (Generate and session RPCs) by gRPC status name.
  std::map<std::string, int64_t> errors;
  // Session RPCs by operation name (multi-turn workloads only).
  std::map<std::string, OperationStats> operations;
  // Open loop: arrivals not started because --max-inflight units were already running.
  int64_t dropped_arrivals = 0;

  // The whole run, warm-up included: what the server saw (compare with its metrics).
  int64_t total_requests = 0;
  int64_t total_output_tokens = 0;
  int64_t total_prompt_tokens = 0;
  int64_t total_cached_prompt_tokens = 0;
  int64_t total_errors = 0;
};

// The measurement window is [window_start_s, window_end_s], in the records' time base.
LoadReport BuildReport(std::vector<std::pair<std::string, std::string>> settings,
                       absl::Span<const GenerateRecord> requests,
                       absl::Span<const OperationRecord> operations, double window_start_s,
                       double window_end_s, int64_t dropped_arrivals);

// The human-readable report (several lines, ending in a newline).
std::string FormatReport(const LoadReport& report);

// The machine-readable report: every field above, latencies in milliseconds.
nlohmann::json ReportToJson(const LoadReport& report);

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_LOAD_REPORT_H_
