// linserve: the inference server (gRPC, and the OpenAI-compatible HTTP API). Wires the layers
// together: loads the model, creates the backend, the engine, the Authenticator both APIs share,
// the gRPC and HTTP servers from the flags (server/options.h), then waits for SIGTERM/SIGINT to
// drain, persist sessions and exit.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/backend/backend_factory.h"
#include "model/format/file_io.h"
#include "model/model.h"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/options.h"
#include "server/transport/auth.h"
#include "server/transport/chat_template.h"
#include "server/transport/grpc_server.h"
#include "server/transport/http_server.h"
#include "server/transport/openai_server.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

// Whether `host` is a loopback address (or names one).
bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status WritePortFile(const std::string& path, int grpc_port, int metrics_port,
                           int http_port) {
  absl::Status s = WriteFileAtomically(
      path, absl::StrCat("grpc_port=", grpc_port, "\nmetrics_port=", metrics_port,
                         "\nhttp_port=", http_port, "\n"));
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--port_file: ", s.message()));
  return absl::OkStatus();
}

// Removes --port_file when created and when destroyed: a stale file from an earlier server
// (which a crash leaves behind) is never mistaken for this one's, and nobody reads this one's
// after it exits.
class PortFileGuard {
 public:
  explicit PortFileGuard(std::string path) : path_(std::move(path)) { Remove(); }
  ~PortFileGuard() { Remove(); }
  PortFileGuard(const PortFileGuard&) = delete;
  PortFileGuard& operator=(const PortFileGuard&) = delete;

 private:
  void Remove() {
    if (path_.empty()) return;
    if (absl::Status s = RemoveFile(path_); !s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("--port_file: {}", s.ToString());
    }
  }
  const std::string path_;
};

// The model's id in the HTTP API: --served_model_name, or the model directory's name.
std::string ModelId(const ServerOptions& options, const std::string& directory) {
  if (!options.served_model_name.empty()) return options.served_model_name;
  const std::filesystem::path path = std::filesystem::path(directory).lexically_normal();
  std::string name = path.filename().string();
  // "models/tiny/" normalises to "models/tiny/": its last component is the empty one.
  if (name.empty()) name = path.parent_path().filename().string();
  return name;
}

// Blocks until SIGTERM or SIGINT (blocked in every thread since the start of main).
int WaitForSignal(const sigset_t& signals) {
  int signal = 0;
  while (sigwait(&signals, &signal) != 0) {
  }
  return signal;
}

int Run(const sigset_t& signals) {
  absl::StatusOr<ServerOptions> options = ServerOptionsFromFlags();
  if (!options.ok()) {
    spdlog::error("{}", options.status().ToString());
    return 1;
  }
  spdlog::set_level(options->log_level);
  // Every HTTP stream holds a socket, and with --state_dir every session in use holds its lock
  // file open (until its change is written): raise the soft limit on open files as far as
  // allowed (often 1024 by default, below a thousand clients plus the server's own files).
  // --http_max_connections bounds the HTTP API's share of it.
  if (rlimit files; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const PortFileGuard port_file(options->port_file);

  absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Create(options->auth);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().ToString());
    return 1;
  }
  EngineOptions& engine_options = options->engine;
  const int32_t tenants = (*auth)->tenant_count();
  ApplyFairTenantShares(tenants, engine_options);
  spdlog::info(
      "tenant quotas ({} tenants named by token files; 0 = the global limit alone): "
      "sessions {}, queued {}, prefix cache {} bytes, turn boundaries {} bytes",
      tenants, engine_options.sessions.tenant_max_sessions, engine_options.tenant_max_queued,
      engine_options.prefix.tenant_budget_bytes,
      engine_options.turn_boundaries.tenant_budget_bytes);

  const absl::Time load_start = absl::Now();
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(options->model_dir);
  if (!model.ok()) {
    spdlog::error("--model: {}", model.status().ToString());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateBackend(**model, options->backend, options->device);
  if (!backend.ok()) {
    spdlog::error("backend: {}", backend.status().ToString());
    return 1;
  }
  spdlog::info("model {} ({} parameters, fingerprint {:.16}...) on {} with {} state slots, "
               "loaded in {}",
               (*model)->directory, (*model)->weights.ParameterCount(), (*model)->fingerprint,
               (*backend)->device() == DeviceKind::kCuda ? "cuda" : "cpu",
               (*backend)->slot_capacity(), absl::FormatDuration(absl::Now() - load_start));

  if (!(*model)->tokenizer->has_text()) {
    spdlog::info(
        "the model has no tokenizer (config.json tokenizer \"none\"): prompts and "
        "generations are token ids; text prompts, chat, stop strings and constraints "
        "are refused");
  }

  if (absl::Status s = ApplySchedulerFlags((*backend)->device(), engine_options.scheduler);
      !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  spdlog::info(
      "prefill: up to {} prompt tokens per step while nothing streams; while sessions "
      "stream, max({}, {} per decoded session)",
      engine_options.scheduler.idle_prefill_token_budget,
      engine_options.scheduler.prefill_token_budget,
      engine_options.scheduler.prefill_tokens_per_decode_row);

  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(**model, *std::move(backend), engine_options, metrics);
  if (!engine.ok()) {
    spdlog::error("engine: {}", engine.status().ToString());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<GrpcServer>> grpc =
      GrpcServer::Start(**engine, **auth, metrics, options->grpc);
  if (!grpc.ok()) {
    spdlog::error("gRPC: {}", grpc.status().ToString());
    return 1;
  }
  std::unique_ptr<OpenAiServer> api;
  if (options->http_port >= 0) {
    absl::StatusOr<std::optional<ChatTemplate>> chat_template =
        ChatTemplate::Load((*model)->directory);
    if (!chat_template.ok()) {
      spdlog::error("--model: {}", chat_template.status().ToString());
      return 1;
    }
    absl::StatusOr<std::unique_ptr<OpenAiServer>> started =
        OpenAiServer::Start(**engine, **auth, metrics,
                            {.host = options->host,
                             .port = options->http_port,
                             .model_id = ModelId(*options, (*model)->directory),
                             .chat_template = *std::move(chat_template),
                             .max_connections = options->http_max_connections,
                             .request_deadline = options->http_request_deadline});
    if (!started.ok()) {
      spdlog::error("--http_port: {}", started.status().ToString());
      return 1;
    }
    api = *std::move(started);
    if (!options->grpc.tls_cert_file.empty()) {
      spdlog::warn("--http_port: the OpenAI API is plaintext HTTP while gRPC uses TLS; serve it "
                   "behind a TLS-terminating proxy, or turn it off with --http_port=-1");
    }
  }
  std::unique_ptr<HttpServer> http;
  if (options->metrics_port >= 0) {
    Engine* e = engine->get();
    GrpcServer* g = grpc->get();
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
        {.host = options->host, .port = options->metrics_port}, metrics,
        [e, g] { return g->serving() && !e->draining() && e->writes_healthy(); });
    if (!started.ok()) {
      spdlog::error("--metrics_port: {}", started.status().ToString());
      return 1;
    }
    http = *std::move(started);
  }
  if (!options->port_file.empty()) {
    if (absl::Status s = WritePortFile(options->port_file, (*grpc)->port(),
                                       http ? http->port() : -1, api ? api->port() : -1);
        !s.ok()) {
      spdlog::error("{}", s.ToString());
      return 1;
    }
  }
  if (!IsLoopback(options->host) && !(*auth)->tokens_required() &&
      !options->auth.certificate_principals) {
    spdlog::warn("--host={}: listening beyond loopback without authentication: anyone who "
                 "reaches these ports may generate, and read and delete sessions; set "
                 "--auth_token_file, --auth_tokens_file or --tls_client_ca",
                 options->host);
  }
  spdlog::info("ready");

  const int signal = WaitForSignal(signals);
  spdlog::info("{}: not serving; draining for up to {}", strsignal(signal),
               absl::FormatDuration(options->drain_deadline));
  (*grpc)->SetServing(false);
  const absl::Status persisted = (*engine)->Shutdown(options->drain_deadline);
  (*grpc)->Shutdown(absl::Seconds(5));
  if (api != nullptr) api->Stop();
  if (http != nullptr) http->Stop();
  if (!persisted.ok()) {
    spdlog::error("sessions were not all persisted: {}", persisted.ToString());
    return 1;
  }
  spdlog::info("shut down cleanly");
  return 0;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  // glibc raises its mmap threshold to the largest block freed (up to 32 MiB); from then on
  // large transient buffers (a received multi-MB message and its parsed copy, a snapshot)
  // are carved from malloc's arenas and stay there once freed: four concurrent 4 MB prompts
  // kept 30-48 MB. A fixed threshold gives every block of 1 MiB or more its own mapping,
  // returned to the system when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  // Blocked before any thread starts, so every thread inherits the mask and only sigwait sees
  // them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::SetProgramUsageMessage(
      "serves a linear-attention transformer over gRPC and an OpenAI-compatible HTTP API.\n"
      "Usage: linserve --model DIR --port 50051 [flags]");
  // --help lists the server's flags (absl would look for a file named after the binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = &linserve::DefinesServerFlags;
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  return linserve::Run(signals);
}
