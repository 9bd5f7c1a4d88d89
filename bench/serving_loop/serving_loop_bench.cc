// linserve-serving-loop-bench: the serving-loop ceiling of issue 9. The engine (and, separately,
// the engine behind the real gRPC transport on loopback) drives an InstantBackend, whose decode
// step costs nothing, with B long concurrent generations; what remains per step is the host
// work of serving: scheduling, the backend's slot checks, emitting tokens (stop matching,
// detokenizing, usage, metrics), the sinks and, over gRPC, the streams to the clients.
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
// and the picks), process_cpu_seconds_per_second (every thread: engine, transport, clients).
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
#include "server/metrics/metrics.h"
#include "server/engine/token_sink.h"
#include "server/transport/grpc_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, batches, "64,256", "Comma-separated concurrencies (decode batches), each "
          "in [1, 4096].");
ABSL_FLAG(std::string, paths, "engine,grpc", "Comma-separated paths: engine, grpc.");
ABSL_FLAG(double, seconds, 5.0, "Measured wall time per point, in (0, 3600].");
ABSL_FLAG(double, warmup_seconds, 1.0, "Unmeasured steady running before each window, [0, 3600].");
ABSL_FLAG(int32_t, prompt_tokens, 16, "Prompt tokens per request, in [1, 4096].");
ABSL_FLAG(int32_t, vocab_size, 50257, "The model's vocabulary (byte tokenizer + specials).");
ABSL_FLAG(std::string, json_out, "", "Also write every result as one JSON document here.");

namespace linserve {
namespace {

constexpr int32_t kUnbounded = 1 << 30;  // max_new_tokens of every request: never reached
constexpr TokenId kBos = 256;
constexpr TokenId kEos = 257;

double ThreadCpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Counts tokens; the engine thread calls it.
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
};

Counters Read(const InstantBackend& backend, const std::atomic<int64_t>& client_tokens) {
  Counters c;
  c.wall = Now();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  c.process_cpu = static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  c.engine_cpu = ThreadCpuSeconds(backend.caller_clock());
  c.steps = backend.decode_steps();
  c.rows = backend.decode_rows();
  c.backend_nanos = backend.decode_nanos();
  c.client_tokens = client_tokens.load(std::memory_order_relaxed);
  return c;
}

// Waits until every one of `batch` requests decodes in one step, runs the warm-up, and returns
// the figures of the window that follows.
absl::StatusOr<nlohmann::json> Measure(const std::string& path, int32_t batch,
                                       const InstantBackend& backend,
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
  const Counters a = Read(backend, client_tokens);
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_seconds)));
  const Counters b = Read(backend, client_tokens);
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
  return j;
}

struct Stack {
  MetricsRegistry metrics;
  InstantBackend* backend = nullptr;  // owned by engine
  std::unique_ptr<Engine> engine;
};

absl::Status StartEngine(const Model& model, int32_t batch, Stack& stack) {
  BackendOptions backend_options;
  backend_options.max_slots = batch;
  backend_options.max_batch_size = batch;
  absl::StatusOr<std::unique_ptr<InstantBackend>> backend =
      InstantBackend::Create(model.config, backend_options);
  if (!backend.ok()) return backend.status();
  stack.backend = backend->get();
  EngineOptions options;
  options.scheduler.max_batch_size = batch;
  options.requests.max_new_tokens = kUnbounded;
  options.max_queue_depth = std::max(256, batch);
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model, *std::move(backend), options, stack.metrics);
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
  absl::StatusOr<nlohmann::json> result = Measure("engine", batch, *stack.backend, tokens);
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

  absl::StatusOr<nlohmann::json> result = Measure("grpc", batch, *stack.backend, client_tokens);
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
