// LoadGenerator: drives a LoadTarget with a closed-loop (N concurrent streams) or open-loop
// (Poisson arrivals) workload of single-shot requests or multi-turn sessions, and records
// every call for the report.
//
// Threads: one per closed-loop stream; in the open loop, a pool that grows to max_inflight and
// one arrival thread; plus the optional progress thread. A "unit" of work is one request
// (single-shot) or one whole session (multi-turn: create, K turns with think time, optional
// fork + one turn on the fork, optional export, delete).
//
// The workload is reproducible: unit i draws its prompt tokens, lengths, think times and seeds
// from its own generator seeded by (seed, i), and the open loop's arrival times come from
// (seed) alone, whatever the scheduling of threads.
#ifndef LINSERVE_CLIENT_LOADTEST_LOAD_GENERATOR_H_
#define LINSERVE_CLIENT_LOADTEST_LOAD_GENERATOR_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/loadtest/distribution.h"
#include "client/loadtest/load_report.h"
#include "client/loadtest/load_target.h"

namespace linserve::loadtest {

struct LoadOptions {
  enum class Mode { kClosed, kOpen };
  // Default: closed.
  Mode mode = Mode::kClosed;
  // Closed loop: units in flight at all times, in [1, 4096]. Default: 8.
  int32_t concurrency = 8;
  // Open loop: mean arrivals (units) per second, Poisson, in (0, 1e6]. Default: 10.
  double rate = 10;
  // Open loop: units in flight at most; an arrival beyond it is dropped and counted, so the
  // offered load never silently becomes a closed loop. In [1, 4096]. Default: 1024.
  int32_t max_inflight = 1024;

  // 0: single-shot requests on ephemeral sessions; K >= 1: sessions of K turns. Default: 0.
  int32_t turns = 0;
  // Pause between a session's turns, milliseconds. Default: 0.
  Distribution think_time_ms = Distribution::Fixed(0);
  // After its turns, fork each session and run one more turn on the fork. Default: false.
  bool fork = false;
  // After its turns, export each session (the whole snapshot is read). Default: false.
  bool export_session = false;
  // With turns >= 1: each unit is a conversation without a session, as stateless
  // (OpenAI-style) clients hold one: every turn resends the whole history (the earlier prompts
  // and replies) followed by its new prompt tokens. Default: false.
  bool resend = false;

  // Prompt tokens per request (random ids below vocab_size, never one of excluded_ids) and
  // max_new_tokens per request. Default: 32 and 64.
  Distribution prompt_tokens = Distribution::Fixed(32);
  Distribution output_tokens = Distribution::Fixed(64);
  // Sampling of every request. Default: 1.0, ignoring EOS so outputs have the drawn length.
  float temperature = 1.0f;
  // Top-k (0: off) and nucleus (1: off) filtering of every request. Default: off.
  int32_t top_k = 0;
  float top_p = 1.0f;
  bool ignore_eos = true;
  // The server's vocabulary and the ids prompts must avoid (BOS, EOS). Required: vocab_size
  // > number of excluded ids.
  int32_t vocab_size = 0;
  std::vector<int32_t> excluded_ids;

  // Bounds: no unit or request starts after warmup + duration; with max_requests > 0 no more
  // than that many measured requests start either. Default: 10 s, no count bound.
  absl::Duration duration = absl::Seconds(10);
  int64_t max_requests = 0;
  // Requests that start before this are run but left out of the figures. Default: none.
  absl::Duration warmup = absl::ZeroDuration();
  // Deadline of every RPC. Default: 60 s.
  absl::Duration request_timeout = absl::Seconds(60);
  // After the bound is reached, calls in flight get this long to finish before they are
  // cancelled (and recorded as CANCELLED). Default: 30 s.
  absl::Duration drain_timeout = absl::Seconds(30);
  // Default: 1.
  uint64_t seed = 1;

  // Where the live progress line goes (nullptr: nowhere) and how often. On a terminal the
  // line is rewritten in place; otherwise one line per interval. Default: nowhere, 1 s.
  FILE* progress = nullptr;
  absl::Duration progress_interval = absl::Seconds(1);
};

// Checks the options; errors are INVALID_ARGUMENT naming the flag (--concurrency, ...) and
// its limit.
absl::Status ValidateLoadOptions(const LoadOptions& options);

struct LoadResult {
  std::vector<GenerateRecord> requests;
  std::vector<OperationRecord> operations;
  // The measurement window, in the records' time base: from the end of the warm-up to the
  // moment the bound stopped new work.
  double window_start_s = 0;
  double window_end_s = 0;
  int64_t dropped_arrivals = 0;
};

// Runs the workload to its bound (blocking). `options` must pass ValidateLoadOptions.
LoadResult RunLoad(LoadTarget& target, const LoadOptions& options);

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_LOAD_GENERATOR_H_
