// linserve-serving-loop-bench: the serving-loop ceiling of issue 9. The engine (and, separately,
// the engine behind the real gRPC transport on loopback) drives an InstantBackend, whose decode
// step costs nothing, with B long concurrent generations; what remains per step is the host
// work of serving: scheduling, the backend's slot checks, emitting tokens (stop matching,
// detokenizing, usage, metrics), the sinks and, over gRPC, the streams to the clients.
//
// With --device_us=D > 0 the InstantBackend sits behind DeviceClockBackend
// (tests/testing/device_clock_backend.h), a stand-in for a GPU's timing: each decode step
// completes D us after it starts on a device thread, the launch returning at once, with
// --steps_in_flight steps in flight at most (2: the engine launches ahead). The step period then
// shows how well the engine overlaps its host work with the device's: ideally
// max(D, host time per step) (issue 38).
//
// Paths (--paths):
//   engine  B requests submitted to the Engine directly, each with a TokenSink that counts.
//   grpc    the Engine behind GrpcServer on 127.0.0.1 port 0 in this process, driven by the
//           load-test library (client/loadtest: one blocking streaming client thread per
//           request, one channel) at concurrency B, also in this process.
// Each measurement waits until every request is decoding in one batch of B, lets it run for
// --warmup_seconds, then reads the counters over --seconds of wall time.
//
// Output: one JSON object per (path, batch) on stdout, and all of them as one JSON document in
// --json_out. Fields: path, batch, seconds (window), steps, tokens (decoded by the engine),
// client_tokens (received by the clients: grpc only; tokens for engine), tokens_per_second,
// client_tokens_per_second, host_us_per_step (window / steps: the engine's step period, which
// with a free backend is all host time), engine_thread_cpu_us_per_step (the engine thread's CPU
// time / steps: its own cost, whatever else ran), engine_thread_cpu_share (CPU time / wall time
// of the engine thread), backend_us_per_step (inside DecodeAndSample: the slot pool's checks
// and the picks; with the stand-in, the device's busy time per step),
// process_cpu_seconds_per_second (every thread: engine, transport, clients), device_us and
// steps_in_flight (the stand-in's; 0 and 1 without it), phase_us_per_step (the engine thread's
// wall time per step in each phase of linserve_engine_phase_seconds), host_busy_us_per_step
// (those phases but collect: the host's own time per step), device_busy_share (the stand-in's
// busy time / window) and period_over_bound (the step period / max(the device's measured step,
// host_busy_us_per_step); 1 is perfect overlap).
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/serving_loop/instant_backend.h"
#include "client/client.h"
#include "client/loadtest/grpc_load_target.h"
#include "client/loadtest/load_generator.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine.h"
#include "server/engine/step_phases.h"
#include "server/metrics/metrics.h"
#include "server/engine/token_sink.h"
#include "server/transport/grpc_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/testing/device_clock_backend.h"
#include "tests/testing/random_model.h"
#include "tests/testing/step_counters.h"

ABSL_FLAG(std::string, batches, "64,256", "Comma-separated concurrencies (decode batches), each "
          "in [1, 4096].");
ABSL_FLAG(std::string, paths, "engine,grpc", "Comma-separated paths: engine, grpc.");
ABSL_FLAG(double, seconds, 5.0, "Measured wall time per point, in (0, 3600].");
ABSL_FLAG(double, warmup_seconds, 1.0, "Unmeasured steady running before each window, [0, 3600].");
ABSL_FLAG(int32_t, prompt_tokens, 16, "Prompt tokens per request, in [1, 4096].");
ABSL_FLAG(int32_t, vocab_size, 50257, "The model's vocabulary (byte tokenizer + specials).");
ABSL_FLAG(std::string, json_out, "", "Also write every result as one JSON document here.");
ABSL_FLAG(int32_t, device_us, 0, "Device time of a decode step in us, in [0, 1000000]: > 0 puts "
          "the backend behind the DeviceClockBackend stand-in for a GPU's timing; 0 runs it "
          "directly.");
ABSL_FLAG(int32_t, steps_in_flight, 2, "With --device_us: decode steps in flight at most, 1 "
          "(collect, then launch) or 2 (launch ahead).");

namespace linserve {
namespace {

constexpr int32_t kUnbounded = 1 << 30;  // max_new_tokens of every request: never reached
constexpr TokenId kBos = 256;
constexpr TokenId kEos = 257;

constexpr StepPhase kPhases[] = {StepPhase::kInbox,   StepPhase::kAdmit,  StepPhase::kPlan,
                                 StepPhase::kLaunch,  StepPhase::kCollect, StepPhase::kEmit,
                                 StepPhase::kPrefill, StepPhase::kExports, StepPhase::kOther};

double ThreadCpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Counts tokens; the engine's emitter threads call it.
class CountingSink : public TokenSink {
 public:
  explicit CountingSink(std::atomic<int64_t>& tokens) : tokens_(tokens) {}
  void OnToken(const GeneratedToken&, std::string_view) override {
    tokens_.fetch_add(1, std::memory_order_relaxed);
  }
  void OnFinish(const absl::Status&, const GenerationResult&) override {}

 private:
  std::atomic<int64_t>& tokens_;
};

// The gRPC load target, counting the tokens the clients receive.
class CountingTarget : public loadtest::LoadTarget {
 public:
  CountingTarget(LoadTarget& target, std::atomic<int64_t>& tokens)
      : target_(target), tokens_(tokens) {}
  loadtest::GenerateOutcome Generate(const loadtest::GenerateCall& call,
                                     absl::FunctionRef<void(int32_t)> on_tokens) override {
    return target_.Generate(call, [&](int32_t n) {
      tokens_.fetch_add(n, std::memory_order_relaxed);
      on_tokens(n);
    });
  }
  absl::StatusOr<std::string> CreateSession(absl::Duration timeout) override {
    return target_.CreateSession(timeout);
  }
  absl::StatusOr<std::string> ForkSession(const std::string& id,
                                          absl::Duration timeout) override {
    return target_.ForkSession(id, timeout);
  }
  absl::StatusOr<int64_t> ExportSession(const std::string& id, absl::Duration timeout) override {
    return target_.ExportSession(id, timeout);
  }
  absl::Status DeleteSession(const std::string& id, absl::Duration timeout) override {
    return target_.DeleteSession(id, timeout);
  }
  void CancelAll() override { target_.CancelAll(); }

 private:
  LoadTarget& target_;
  std::atomic<int64_t>& tokens_;
};

struct Counters {
  double wall = 0;
  double process_cpu = 0;
  double engine_cpu = 0;
  int64_t steps = 0;
  int64_t rows = 0;
  int64_t backend_nanos = 0;
  int64_t client_tokens = 0;
  std::vector<double> phase_seconds;  // per kPhases entry: the histogram's sum
};

// The engine's phase histogram for `phase` (StepPhases registers it under these names).
Histogram& PhaseHistogram(MetricsRegistry& metrics, StepPhase phase) {
  return metrics.GetHistogram("linserve_engine_phase_seconds", "", {},
                              {{"phase", std::string(StepPhaseName(phase))}});
}

Counters Read(const StepCounters& backend, MetricsRegistry& metrics,
              const std::atomic<int64_t>& client_tokens) {
  Counters c;
  c.wall = Now();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  c.process_cpu = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  c.engine_cpu = ThreadCpuSeconds(backend.caller_clock());
  c.steps = backend.steps();
  c.rows = backend.rows();
  c.backend_nanos = backend.nanos();
  c.client_tokens = client_tokens.load(std::memory_order_relaxed);
  for (StepPhase phase : kPhases) {
    c.phase_seconds.push_back(PhaseHistogram(metrics, phase).snapshot().sum);
  }
  return c;
}

// Waits until every one of `batch` requests decodes in one step, runs the warm-up, and returns
// the figures of the window that follows.
absl::StatusOr<nlohmann::json> Measure(const std::string& path, int32_t batch,
                                       const StepCounters& backend, MetricsRegistry& metrics,
                                       const std::atomic<int64_t>& client_tokens) {
  const double give_up = Now() + 60;
  while (!backend.has_caller_clock() || backend.last_batch() != batch) {
    if (Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          path, " at batch ", batch, ": the decode batch stayed at ", backend.last_batch()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_warmup_seconds)));
  const Counters a = Read(backend, metrics, client_tokens);
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  const Counters b = Read(backend, metrics, client_tokens);
  const double seconds = b.wall - a.wall;
  const double steps = static_cast<double>(b.steps - a.steps);
  const double tokens = static_cast<double>(b.rows - a.rows);
  const double client = static_cast<double>(b.client_tokens - a.client_tokens);
  nlohmann::json j;
  j["path"] = path;
  j["batch"] = batch;
  j["seconds"] = seconds;
  j["steps"] = b.steps - a.steps;
  j["tokens"] = b.rows - a.rows;
  j["client_tokens"] = b.client_tokens - a.client_tokens;
  j["tokens_per_second"] = tokens / seconds;
  j["client_tokens_per_second"] = client / seconds;
  j["host_us_per_step"] = steps > 0 ? 1e6 * seconds / steps : 0.0;
  j["engine_thread_cpu_us_per_step"] = steps > 0 ? 1e6 * (b.engine_cpu - a.engine_cpu) / steps : 0;
  j["engine_thread_cpu_share"] = (b.engine_cpu - a.engine_cpu) / seconds;
  j["backend_us_per_step"] =
      steps > 0 ? 1e-3 * static_cast<double>(b.backend_nanos - a.backend_nanos) / steps : 0.0;
  j["process_cpu_seconds_per_second"] = (b.process_cpu - a.process_cpu) / seconds;
  const int32_t device_us = absl::GetFlag(FLAGS_device_us);
  j["device_us"] = device_us;
  j["steps_in_flight"] = device_us > 0 ? absl::GetFlag(FLAGS_steps_in_flight) : 1;
  // The phases are per engine step, which with a step always decoding is a decode step.
  nlohmann::json phases = nlohmann::json::object();
  double host_busy = 0;
  for (size_t i = 0; i < std::size(kPhases); ++i) {
    const double us = steps > 0 ? 1e6 * (b.phase_seconds[i] - a.phase_seconds[i]) / steps : 0.0;
    phases[std::string(StepPhaseName(kPhases[i]))] = us;
    if (kPhases[i] != StepPhase::kCollect) host_busy += us;
  }
  j["phase_us_per_step"] = phases;
  j["host_busy_us_per_step"] = host_busy;
  if (device_us > 0) {
    j["device_busy_share"] =
        1e-9 * static_cast<double>(b.backend_nanos - a.backend_nanos) / seconds;
    // The device's measured step (D plus the device thread's late wake-ups), not D.
    const double device_step =
        steps > 0 ? 1e-3 * static_cast<double>(b.backend_nanos - a.backend_nanos) / steps : 0.0;
    const double bound = std::max(device_step, host_busy);
    j["period_over_bound"] = steps > 0 ? 1e6 * seconds / steps / bound : 0.0;
  }
  return j;
}

struct Stack {
  MetricsRegistry metrics;
  const StepCounters* counters = nullptr;  // the engine's backend's
  std::unique_ptr<Engine> engine;
};

absl::Status StartEngine(const Model& model, int32_t batch, Stack& stack) {
  BackendOptions backend_options;
  backend_options.max_slots = batch;
  backend_options.max_batch_size = batch;
  absl::StatusOr<std::unique_ptr<InstantBackend>> instant =
      InstantBackend::Create(model.config, backend_options);
  if (!instant.ok()) return instant.status();
  stack.counters = &(*instant)->counters();
  std::unique_ptr<Backend> backend = *std::move(instant);
  if (const int32_t device_us = absl::GetFlag(FLAGS_device_us); device_us > 0) {
    absl::StatusOr<std::unique_ptr<DeviceClockBackend>> device = DeviceClockBackend::Create(
        std::move(backend), absl::Microseconds(device_us), absl::GetFlag(FLAGS_steps_in_flight));
    if (!device.ok()) return device.status();
    stack.counters = &(*device)->counters();
    backend = *std::move(device);
  }
  EngineOptions options;
  options.scheduler.max_batch_size = batch;
  options.requests.max_new_tokens = kUnbounded;
  options.max_queue_depth = std::max(256, batch);
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model, std::move(backend), options, stack.metrics);
  if (!engine.ok()) return engine.status();
  stack.engine = *std::move(engine);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> RunEngine(const Model& model, int32_t batch) {
  Stack stack;
  if (absl::Status s = StartEngine(model, batch, stack); !s.ok()) return s;
  std::atomic<int64_t> tokens{0};
  for (int32_t i = 0; i < batch; ++i) {
    GenerateRequest request;
    request.request_id = absl::StrCat("bench-", i);
    for (int32_t t = 0; t < absl::GetFlag(FLAGS_prompt_tokens); ++t) {
      request.prompt.push_back(static_cast<TokenId>('a' + (i + t) % 26));
    }
    request.max_new_tokens = kUnbounded;
    request.sampling.seed = static_cast<uint64_t>(i) + 1;
    request.ignore_eos = true;
    absl::StatusOr<JobId> job =
        stack.engine->Submit(std::move(request), std::make_shared<CountingSink>(tokens));
    if (!job.ok()) return job.status();
  }
  absl::StatusOr<nlohmann::json> result =
      Measure("engine", batch, *stack.counters, stack.metrics, tokens);
  stack.engine->Shutdown(absl::ZeroDuration()).IgnoreError();
  return result;
}

absl::StatusOr<nlohmann::json> RunGrpc(const Model& model, int32_t batch) {
  Stack stack;
  if (absl::Status s = StartEngine(model, batch, stack); !s.ok()) return s;
  GrpcServerOptions grpc_options;
  grpc_options.address = "127.0.0.1:0";
  grpc_options.reflection = false;
  const Authenticator auth({}, /*certificate_principals=*/false);
  absl::StatusOr<std::unique_ptr<GrpcServer>> server =
      GrpcServer::Start(*stack.engine, auth, stack.metrics, grpc_options);
  if (!server.ok()) return server.status();
  ClientOptions client_options;
  client_options.target = absl::StrCat("127.0.0.1:", (*server)->port());
  client_options.timeout = absl::InfiniteDuration();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(client_options);
  if (!client.ok()) return client.status();

  std::atomic<int64_t> client_tokens{0};
  loadtest::GrpcLoadTarget grpc_target(**client);
  CountingTarget target(grpc_target, client_tokens);
  loadtest::LoadOptions load;
  load.concurrency = batch;
  load.prompt_tokens = loadtest::Distribution::Fixed(absl::GetFlag(FLAGS_prompt_tokens));
  load.output_tokens = loadtest::Distribution::Fixed(kUnbounded);
  load.vocab_size = model.config.vocab_size;
  load.excluded_ids = {kBos, kEos};
  // One request per stream, ended by CancelAll after the window: the (batch + 1)-th start
  // stops the run.
  load.max_requests = batch;
  load.duration = absl::Hours(1);
  load.request_timeout = absl::Hours(1);
  load.drain_timeout = absl::Seconds(5);
  if (absl::Status s = loadtest::ValidateLoadOptions(load); !s.ok()) return s;
  std::thread driver([&] { loadtest::RunLoad(target, load); });

  absl::StatusOr<nlohmann::json> result =
      Measure("grpc", batch, *stack.counters, stack.metrics, client_tokens);
  target.CancelAll();
  driver.join();
  (*server)->SetServing(false);
  stack.engine->Shutdown(absl::ZeroDuration()).IgnoreError();
  (*server)->Shutdown(absl::Seconds(5));
  return result;
}

absl::Status Main() {
  std::vector<int32_t> batches;
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int32_t value = 0;
    if (!absl::SimpleAtoi(b, &value) || value < 1 || value > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("--batches: '", b, "' is not in [1, 4096]"));
    }
    batches.push_back(value);
  }
  std::vector<std::string> paths = absl::StrSplit(absl::GetFlag(FLAGS_paths), ',');
  for (const std::string& p : paths) {
    if (p != "engine" && p != "grpc") {
      return absl::InvalidArgumentError(absl::StrCat("--paths: unknown path '", p, "'"));
    }
  }
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double warmup = absl::GetFlag(FLAGS_warmup_seconds);
  const int32_t prompt = absl::GetFlag(FLAGS_prompt_tokens);
  if (!(seconds > 0 && seconds <= 3600) || !(warmup >= 0 && warmup <= 3600) || prompt < 1 ||
      prompt > 4096) {
    return absl::InvalidArgumentError("--seconds, --warmup_seconds or --prompt_tokens out of range");
  }
  const int32_t device_us = absl::GetFlag(FLAGS_device_us);
  if (device_us < 0 || device_us > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device_us = ", device_us, " is outside [0, 1000000]"));
  }
  if (const int32_t in_flight = absl::GetFlag(FLAGS_steps_in_flight);
      in_flight != 1 && in_flight != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps_in_flight = ", in_flight, " is neither 1 nor 2"));
  }

  ModelConfig config = TinyConfig();
  config.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  config.bos_token_id = kBos;
  config.eos_token_id = kEos;
  const Model model = MakeRandomModel(config, 1);

  nlohmann::json all = nlohmann::json::array();
  for (const std::string& path : paths) {
    for (int32_t batch : batches) {
      spdlog::info("{} at batch {}", path, batch);
      absl::StatusOr<nlohmann::json> r =
          path == "engine" ? RunEngine(model, batch) : RunGrpc(model, batch);
      if (!r.ok()) return r.status();
      (*r)["vocab_size"] = config.vocab_size;
      (*r)["prompt_tokens"] = prompt;
      std::printf("%s\n", r->dump().c_str());
      std::fflush(stdout);
      all.push_back(*std::move(r));
    }
  }
  if (const std::string out = absl::GetFlag(FLAGS_json_out); !out.empty()) {
    FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot write ", out));
    std::fprintf(f, "%s\n", all.dump(2).c_str());
    std::fclose(f);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "The serving-loop ceiling: engine and engine + gRPC over a backend whose step is free.");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));
  spdlog::set_level(spdlog::level::warn);
  if (absl::Status s = linserve::Main(); !s.ok()) {
    std::fprintf(stderr, "linserve-serving-loop-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
