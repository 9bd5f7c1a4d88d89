#include "client/loadtest/load_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace linserve::loadtest {
namespace {

std::vector<double> Milliseconds(std::vector<double> seconds) {
  for (double& value : seconds) value *= 1e3;
  return seconds;
}

std::string FormatLatency(absl::string_view label, const LatencySummary& s) {
  if (s.count == 0) return absl::StrFormat("  %-22s (no samples)\n", label);
  return absl::StrFormat("  %-22s p50 %9.2f  p90 %9.2f  p99 %9.2f  max %9.2f  mean %9.2f  (n=%d)\n",
                         label, s.p50, s.p90, s.p99, s.max, s.mean, s.count);
}

nlohmann::json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

}  // namespace

LoadReport BuildReport(std::vector<std::pair<std::string, std::string>> settings,
                       absl::Span<const GenerateRecord> requests,
                       absl::Span<const OperationRecord> operations, double window_start_s,
                       double window_end_s, int64_t dropped_arrivals) {
  LoadReport report;
  report.settings = std::move(settings);
  const double measured_seconds = std::max(0.0, window_end_s - window_start_s);
  report.measured_seconds = measured_seconds;
  auto in_window = [&](double t) { return t >= window_start_s && t <= window_end_s; };
  int64_t completions_in_window = 0;
  report.dropped_arrivals = dropped_arrivals;
  std::vector<double> ttft;
  std::vector<double> itl;
  std::vector<double> e2e;
  for (const GenerateRecord& r : requests) {
    ++report.total_requests;
    report.total_output_tokens += r.output_tokens;
    report.total_prompt_tokens += r.prompt_tokens;
    report.total_cached_prompt_tokens += r.cached_prompt_tokens;
    if (r.code != absl::StatusCode::kOk) ++report.total_errors;
    if (r.first_token_s >= 0) {
      // Token arrival times: the first token's, then one gap after another.
      double t = r.first_token_s;
      report.output_tokens += in_window(t) ? 1 : 0;
      for (double gap : r.inter_token_s) {
        t += gap;
        report.output_tokens += in_window(t) ? 1 : 0;
      }
    }
    if (r.code == absl::StatusCode::kOk && in_window(r.end_s)) ++completions_in_window;
    if (!r.measured) continue;
    report.prompt_tokens += r.prompt_tokens;
    report.cached_prompt_tokens += r.cached_prompt_tokens;
    if (r.code != absl::StatusCode::kOk) {
      ++report.requests_failed;
      ++report.errors[absl::StatusCodeToString(r.code)];
      continue;
    }
    ++report.requests_ok;
    if (r.first_token_s >= 0) ttft.push_back(r.first_token_s - r.start_s);
    itl.insert(itl.end(), r.inter_token_s.begin(), r.inter_token_s.end());
    e2e.push_back(r.end_s - r.start_s);
  }
  std::map<std::string, std::vector<double>> op_latencies;
  std::map<std::string, int64_t> op_bytes;
  for (const OperationRecord& op : operations) {
    if (op.code != absl::StatusCode::kOk) ++report.total_errors;
    if (!op.measured) continue;
    OperationStats& stats = report.operations[op.op];
    if (op.code != absl::StatusCode::kOk) {
      ++stats.failed;
      ++report.errors[absl::StatusCodeToString(op.code)];
      continue;
    }
    ++stats.ok;
    op_latencies[op.op].push_back(op.latency_s);
    op_bytes[op.op] += op.bytes;
  }
  for (auto& [name, stats] : report.operations) {
    stats.latency_ms = Summarize(Milliseconds(std::move(op_latencies[name])));
    if (stats.ok > 0) {
      stats.mean_bytes = static_cast<double>(op_bytes[name]) / static_cast<double>(stats.ok);
    }
  }
  report.time_to_first_token_ms = Summarize(Milliseconds(std::move(ttft)));
  report.inter_token_latency_ms = Summarize(Milliseconds(std::move(itl)));
  report.end_to_end_ms = Summarize(Milliseconds(std::move(e2e)));
  if (measured_seconds > 0) {
    report.requests_per_second = static_cast<double>(completions_in_window) / measured_seconds;
    report.output_tokens_per_second = static_cast<double>(report.output_tokens) / measured_seconds;
  }
  return report;
}

std::string FormatReport(const LoadReport& r) {
  std::string out = "linserve-loadtest report\n";
  for (const auto& [name, value] : r.settings) {
    absl::StrAppendFormat(&out, "  %-22s %s\n", name, value);
  }
  absl::StrAppendFormat(&out, "throughput over %.2f s (warm-up and drain excluded)\n",
                        r.measured_seconds);
  absl::StrAppendFormat(&out, "  %-22s %.2f\n", "requests/s", r.requests_per_second);
  absl::StrAppendFormat(&out, "  %-22s %.1f\n", "output tokens/s", r.output_tokens_per_second);
  absl::StrAppendFormat(&out, "  %-22s %d\n", "output tokens", r.output_tokens);
  out += "requests started after the warm-up\n";
  absl::StrAppendFormat(&out, "  %-22s %d ok, %d failed\n", "requests", r.requests_ok,
                        r.requests_failed);
  absl::StrAppendFormat(&out, "  %-22s %d (%d cached)\n", "prompt tokens", r.prompt_tokens,
                        r.cached_prompt_tokens);
  out += "latency (ms)\n";
  out += FormatLatency("time to first token", r.time_to_first_token_ms);
  out += FormatLatency("inter-token", r.inter_token_latency_ms);
  out += FormatLatency("end-to-end", r.end_to_end_ms);
  if (!r.operations.empty()) {
    out += "session operations (ms)\n";
    for (const auto& [name, stats] : r.operations) {
      out += FormatLatency(absl::StrCat(name, " (", stats.failed, " failed)"), stats.latency_ms);
      if (name == "export" && stats.ok > 0) {
        absl::StrAppendFormat(&out, "  %-22s %.0f bytes\n", "mean snapshot", stats.mean_bytes);
      }
    }
  }
  out += "errors\n";
  if (r.errors.empty()) out += "  none\n";
  for (const auto& [code, count] : r.errors) absl::StrAppendFormat(&out, "  %-22s %d\n", code, count);
  if (r.dropped_arrivals > 0) {
    absl::StrAppendFormat(&out, "dropped arrivals (--max-inflight reached): %d\n",
                          r.dropped_arrivals);
  }
  absl::StrAppendFormat(&out,
                        "whole run incl. warm-up: %d requests, %d output tokens, %d prompt "
                        "tokens, %d errors\n",
                        r.total_requests, r.total_output_tokens, r.total_prompt_tokens,
                        r.total_errors);
  return out;
}

nlohmann::json ReportToJson(const LoadReport& r) {
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& [name, value] : r.settings) settings[name] = value;
  nlohmann::json operations = nlohmann::json::object();
  for (const auto& [name, stats] : r.operations) {
    operations[name] = {{"ok", stats.ok},
                        {"failed", stats.failed},
                        {"latency_ms", LatencyJson(stats.latency_ms)},
                        {"mean_bytes", stats.mean_bytes}};
  }
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [code, count] : r.errors) errors[code] = count;
  return {
      {"settings", settings},
      {"measured_seconds", r.measured_seconds},
      {"requests_ok", r.requests_ok},
      {"requests_failed", r.requests_failed},
      {"requests_per_second", r.requests_per_second},
      {"output_tokens", r.output_tokens},
      {"prompt_tokens", r.prompt_tokens},
      {"cached_prompt_tokens", r.cached_prompt_tokens},
      {"output_tokens_per_second", r.output_tokens_per_second},
      {"time_to_first_token_ms", LatencyJson(r.time_to_first_token_ms)},
      {"inter_token_latency_ms", LatencyJson(r.inter_token_latency_ms)},
      {"end_to_end_ms", LatencyJson(r.end_to_end_ms)},
      {"errors", errors},
      {"operations", operations},
      {"dropped_arrivals", r.dropped_arrivals},
      {"total",
       {{"requests", r.total_requests},
        {"output_tokens", r.total_output_tokens},
        {"prompt_tokens", r.total_prompt_tokens},
        {"cached_prompt_tokens", r.total_cached_prompt_tokens},
        {"errors", r.total_errors}}},
  };
}

}  // namespace linserve::loadtest
