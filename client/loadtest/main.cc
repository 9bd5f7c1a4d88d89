// linserve-loadtest: offers a linserve server a closed-loop or open-loop load of streaming
// generations (single-shot or multi-turn sessions), shows a live progress line on stderr, and
// reports throughput and latency percentiles on stdout (and as JSON with --json FILE).
//
// Exit status: 0 when the run completed (failed requests are counted in the report, by gRPC
// code); 64 for a usage error; otherwise the gRPC status code of the failure that prevented
// the run (e.g. 14 UNAVAILABLE when the server cannot be reached).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_set.h"
#include "client/client.h"
#include "client/loadtest/constraint_option.h"
#include "client/loadtest/distribution.h"
#include "client/loadtest/grpc_load_target.h"
#include "client/loadtest/load_generator.h"
#include "client/loadtest/load_report.h"

namespace linserve::loadtest {
namespace {

constexpr int kUsageExit = 64;
constexpr int64_t kMaxLength = 1 << 24;

constexpr char kAbout[] =
    "linserve-loadtest: offers a linserve server a load of streaming generations and reports\n"
    "requests/s, output tokens/s, time to first token, inter-token latency and end-to-end\n"
    "latency (p50/p90/p99/max) and errors by gRPC code.\n\n"
    "Usage: linserve-loadtest [flags]\n\n"
    "Closed loop (--mode=closed): --concurrency units in flight at all times. Open loop\n"
    "(--mode=open): units arrive as a Poisson process of --rate per second, whatever the\n"
    "server's speed. A unit is one request (--turns=0) or one session: create, --turns turns\n"
    "separated by --think-time-ms, then optionally --fork (one more turn on a copy) and\n"
    "--export, then delete. Prompts are random token ids (never BOS or EOS) of\n"
    "--prompt-tokens; each request asks for --output-tokens. Lengths and think times take\n"
    "N, fixed:N, uniform:A:B or normal:MEAN:SD. The run stops starting work after --warmup\n"
    "plus --duration, or after --requests measured requests; requests started during the\n"
    "warm-up run but are left out of the figures. --constraint sends a structured-output\n"
    "constraint with every request.\n\n"
    "Exit status: 0 when the run completed (failed requests are reported, not fatal); 64 for a\n"
    "usage error; otherwise the gRPC status code that prevented the run.\n\nFlags:\n";

struct Flags {
  cli::ConnectionFlags connection{"127.0.0.1:50051"};
  std::string mode = "closed";
  int32_t concurrency = 8;
  double rate = 10;
  int32_t max_inflight = 1024;
  int32_t turns = 0;
  std::string think_time_ms = "0";
  bool fork = false;
  bool export_session = false;
  bool resend = false;
  std::string prompt_tokens = "32";
  std::string output_tokens = "64";
  double temperature = 1.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  bool ignore_eos = true;
  std::string constraint;
  absl::Duration duration = absl::Seconds(10);
  int64_t requests = 0;
  absl::Duration warmup = absl::ZeroDuration();
  absl::Duration request_timeout = absl::Seconds(60);
  absl::Duration drain_timeout = absl::Seconds(30);
  int64_t seed = 1;
  std::string json;
  absl::Duration progress_interval = absl::Seconds(1);
  bool help = false;

  void AddTo(cli::FlagSet& f) {
    connection.AddTo(f);
    f.Add("mode", &mode, "closed|open", "Closed loop (fixed concurrency) or open loop (Poisson "
          "arrivals).");
    f.Add("concurrency", &concurrency, "N", "Closed loop: units in flight, [1, 4096].");
    f.Add("rate", &rate, "R", "Open loop: mean unit arrivals per second, (0, 1e6].");
    f.Add("max-inflight", &max_inflight, "N",
          "Open loop: units in flight at most; later arrivals are dropped and counted, [1, "
          "4096].");
    f.Add("turns", &turns, "K",
          "0: single-shot requests; K >= 1: sessions of K turns (multi-turn workload).");
    f.Add("think-time-ms", &think_time_ms, "DIST", "Pause between a session's turns, ms.");
    f.Add("fork", &fork, "After its turns, fork each session and run one turn on the fork.");
    f.Add("export", &export_session, "After its turns, export each session's snapshot.");
    f.Add("resend", &resend,
          "With --turns K: conversations without a session, each turn resending the whole "
          "history (earlier prompts and replies) plus its --prompt-tokens new tokens, as "
          "stateless chat clients do.");
    f.Add("prompt-tokens", &prompt_tokens, "DIST", "Prompt length per request, tokens.");
    f.Add("output-tokens", &output_tokens, "DIST", "max_new_tokens per request.");
    f.Add("temperature", &temperature, "T", "Sampling temperature of every request, >= 0.");
    f.Add("top-k", &top_k, "K", "Keep only the K most likely tokens; 0 = off.");
    f.Add("top-p", &top_p, "P", "Nucleus sampling: keep the smallest set reaching P, (0, 1]; "
          "1 = off.");
    f.Add("ignore-eos", &ignore_eos,
          "Ask the server to ignore EOS, so every request generates its --output-tokens "
          "(--noignore-eos lets requests stop early).");
    f.Add("constraint", &constraint, "KIND",
          "Structured output: every request carries this constraint: json_object, "
          "json_schema:FILE, regex:PATTERN or grammar:FILE (docs/server.md). Requests then "
          "stop when the document is complete, and --ignore-eos is off (the server refuses "
          "both together). Empty: none.");
    f.Add("duration", &duration, "DURATION",
          "How long to start new work after the warm-up (e.g. 30s, 2m).");
    f.Add("requests", &requests, "N",
          "Also stop after N measured requests have started; 0 = no count bound.");
    f.Add("warmup", &warmup, "DURATION",
          "Run this long first without counting it in the figures.");
    f.Add("request-timeout", &request_timeout, "DURATION", "Deadline of every RPC.");
    f.Add("drain-timeout", &drain_timeout, "DURATION",
          "After the bound, how long calls in flight may finish before they are cancelled.");
    f.Add("seed", &seed, "SEED", "Seed of the workload (prompts, lengths, arrivals, sampling).");
    f.Add("json", &json, "FILE", "Also write the report as JSON to FILE (\"-\": stdout).");
    f.Add("progress-interval", &progress_interval, "DURATION",
          "How often the progress line on stderr is updated; 0 turns it off.");
    f.Add("help", &help, "Show this help.");
  }
};

int UsageFail(absl::string_view message) {
  std::cerr << "error: " << message << "\nrun linserve-loadtest --help\n";
  return kUsageExit;
}

int Fail(absl::string_view what, const absl::Status& status) {
  std::cerr << "error: " << what << ": " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return static_cast<int>(status.code());
}

int Main(int argc, char** argv) {
  Flags flags;
  cli::FlagSet set;
  flags.AddTo(set);
  absl::StatusOr<std::vector<std::string>> positional =
      set.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!positional.ok()) return UsageFail(positional.status().message());
  if (flags.help) {
    std::cout << kAbout << set.Usage();
    return 0;
  }
  if (!positional->empty()) {
    return UsageFail(absl::StrCat("unexpected argument \"", (*positional)[0], "\""));
  }

  LoadOptions options;
  if (flags.mode == "closed") {
    options.mode = LoadOptions::Mode::kClosed;
  } else if (flags.mode == "open") {
    options.mode = LoadOptions::Mode::kOpen;
  } else {
    return UsageFail(absl::StrCat("--mode=", flags.mode, ": expected closed or open"));
  }
  options.concurrency = flags.concurrency;
  options.rate = flags.rate;
  options.max_inflight = flags.max_inflight;
  options.turns = flags.turns;
  options.fork = flags.fork;
  options.export_session = flags.export_session;
  options.resend = flags.resend;
  options.temperature = static_cast<float>(flags.temperature);
  options.top_k = flags.top_k;
  options.top_p = static_cast<float>(flags.top_p);
  std::optional<v1::Constraint> constraint;
  if (!flags.constraint.empty()) {
    absl::StatusOr<v1::Constraint> parsed = ParseConstraintOption(flags.constraint);
    if (!parsed.ok()) return UsageFail(parsed.status().message());
    constraint = *std::move(parsed);
  }
  // A constrained request ends where its document does: the server refuses ignore_eos with it.
  options.ignore_eos = flags.ignore_eos && !constraint.has_value();
  options.duration = flags.duration;
  options.max_requests = flags.requests;
  options.warmup = flags.warmup;
  options.request_timeout = flags.request_timeout;
  options.drain_timeout = flags.drain_timeout;
  options.seed = static_cast<uint64_t>(flags.seed);
  if (flags.progress_interval < absl::ZeroDuration()) {
    return UsageFail("--progress-interval: must be >= 0");
  }
  options.progress = flags.progress_interval > absl::ZeroDuration() ? stderr : nullptr;
  options.progress_interval = flags.progress_interval;

  absl::StatusOr<ClientOptions> client_options = flags.connection.ToClientOptions();
  if (!client_options.ok()) {
    if (client_options.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageFail(client_options.status().message());
    }
    return Fail("connection flags", client_options.status());
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(*client_options);
  if (!client.ok()) return Fail("client", client.status());
  absl::StatusOr<v1::GetModelInfoResponse> info = (*client)->GetModelInfo();
  if (!info.ok()) return Fail(absl::StrCat("GetModelInfo from ", flags.connection.target),
                              info.status());
  const v1::ServerLimits& limits = info->limits();
  options.vocab_size = info->model().vocab_size();
  for (int32_t id : {info->model().bos_token_id(), info->model().eos_token_id()}) {
    if (id >= 0) options.excluded_ids.push_back(id);
  }

  // Lengths are checked against the server's own limits so that a run does not consist of
  // INVALID_ARGUMENT errors.
  absl::StatusOr<Distribution> prompt =
      Distribution::Parse(flags.prompt_tokens, "--prompt-tokens", 1, kMaxLength);
  if (!prompt.ok()) return UsageFail(prompt.status().message());
  absl::StatusOr<Distribution> output =
      Distribution::Parse(flags.output_tokens, "--output-tokens", 1, kMaxLength);
  if (!output.ok()) return UsageFail(output.status().message());
  for (const auto& [flag, dist, limit_name, limit] :
       {std::tuple("prompt-tokens", &*prompt, "max_prompt_tokens", limits.max_prompt_tokens()),
        std::tuple("output-tokens", &*output, "max_new_tokens", limits.max_new_tokens())}) {
    if (limit > 0 && dist->kind() != Distribution::Kind::kNormal && dist->max() > limit) {
      return UsageFail(absl::StrCat("--", flag, "=", dist->ToString(), ": reaches ", dist->max(),
                                    " tokens, over the server's ", limit_name, " of ", limit));
    }
    if (limit > 0 && dist->kind() == Distribution::Kind::kNormal) {
      // A normal distribution is clamped to the server's limit rather than refused.
      absl::StatusOr<Distribution> clamped =
          Distribution::Parse(dist->ToString(), absl::StrCat("--", flag), 1, limit);
      if (!clamped.ok()) return UsageFail(clamped.status().message());
      *dist = *clamped;
    }
  }
  absl::StatusOr<Distribution> think =
      Distribution::Parse(flags.think_time_ms, "--think-time-ms", 0, 3'600'000);
  if (!think.ok()) return UsageFail(think.status().message());
  options.prompt_tokens = *prompt;
  options.output_tokens = *output;
  options.think_time_ms = *think;
  if (absl::Status s = ValidateLoadOptions(options); !s.ok()) return UsageFail(s.message());
  // A resent conversation's last prompt holds every turn's prompt and reply but the last reply.
  if (const int64_t limit = limits.max_prompt_tokens();
      options.resend && limit > 0 && prompt->kind() != Distribution::Kind::kNormal &&
      output->kind() != Distribution::Kind::kNormal) {
    const int64_t longest =
        int64_t{flags.turns} * prompt->max() + int64_t{flags.turns - 1} * output->max() + 1;
    if (longest > limit) {
      return UsageFail(absl::StrCat("--resend --turns=", flags.turns,
                                    ": the last turn's prompt reaches ", longest,
                                    " tokens, over the server's max_prompt_tokens of ", limit));
    }
  }

  std::vector<std::pair<std::string, std::string>> settings = {
      {"target", flags.connection.target},
      {"model", absl::StrCat(info->model().architecture(), ", ", info->model().parameter_count(),
                             " parameters, on ", info->device())},
      {"mode", flags.mode},
      {options.mode == LoadOptions::Mode::kClosed ? "concurrency" : "rate",
       options.mode == LoadOptions::Mode::kClosed ? absl::StrCat(flags.concurrency)
                                                  : absl::StrCat(flags.rate, "/s")},
      {"workload",
       flags.turns == 0 ? std::string("single-shot")
       : flags.resend
           ? absl::StrCat("conversations of ", flags.turns,
                          " turns resending their history, think ", think->ToString(), " ms")
           : absl::StrCat("sessions of ", flags.turns, " turns, think ", think->ToString(), " ms",
                          flags.fork ? ", fork" : "", flags.export_session ? ", export" : "")},
      {"prompt tokens", prompt->ToString()},
      {"output tokens", output->ToString()},
      {"bound",
       absl::StrCat(absl::FormatDuration(flags.duration),
                    flags.requests > 0 ? absl::StrCat(" or ", flags.requests, " requests") : "",
                    ", warm-up ", absl::FormatDuration(flags.warmup))},
      {"seed", absl::StrCat(flags.seed)},
  };
  if (constraint.has_value()) settings.emplace_back("constraint", flags.constraint);
  if (options.mode == LoadOptions::Mode::kOpen) {
    settings.emplace_back("max inflight", absl::StrCat(flags.max_inflight));
  }

  GrpcLoadTarget target(**client, std::move(constraint));
  const LoadResult result = RunLoad(target, options);
  const LoadReport report = BuildReport(std::move(settings), result.requests, result.operations,
                                        result.window_start_s, result.window_end_s,
                                        result.dropped_arrivals);
  std::cout << FormatReport(report);
  std::cout.flush();
  if (!flags.json.empty()) {
    const std::string json = ReportToJson(report).dump(2) + "\n";
    if (flags.json == "-") {
      std::cout << json;
    } else {
      std::ofstream out(flags.json, std::ios::trunc);
      out << json;
      out.close();
      if (!out) {
        std::cerr << "error: --json=" << flags.json << ": cannot write the file\n";
        return static_cast<int>(absl::StatusCode::kUnknown);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace linserve::loadtest

int main(int argc, char** argv) { return linserve::loadtest::Main(argc, argv); }
