#include "server/options.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/constraints/constraint_spec.h"

ABSL_FLAG(std::string, model, LINSERVE_DEFAULT_MODEL_DIR,
          "Model directory: config.json, model.safetensors and, for SentencePiece models, "
          "tokenizer.model.");
ABSL_FLAG(std::string, device, "auto",
          "Where the model runs: auto (CUDA when this build has it and a GPU is present, else "
          "CPU), cpu or cuda.");
// Default: auto (bf16 on CUDA, fp32 on the CPU).
ABSL_FLAG(std::string, weight_precision, "auto",
          "Storage of the weight matrices: auto (bf16 on CUDA, fp32 on the CPU), fp32, bf16, "
          "fp16 or int8 (CPU only: a scale per 32 weights). Embeddings, norms, biases and the "
          "recurrent state (see --state_precision) stay fp32, and GEMMs accumulate in fp32, "
          "everywhere.");
// Default: fp32.
ABSL_FLAG(std::string, state_precision, "fp32",
          "Storage of the recurrent state in the slot pool: fp32, or bf16 (CUDA only, models whose "
          "mixer kinds all allow it, as docs/model-format.md says of each: the state in bf16, "
          "accumulated in fp32, half the state memory and traffic). Exported, imported, "
          "snapshotted and persisted states stay fp32.");
// Default: 127.0.0.1 (loopback only, as llama.cpp's server; images pass --host=0.0.0.0).
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Interface the gRPC and HTTP servers listen on (0.0.0.0: every interface). Listening "
          "beyond loopback without --auth_token_file, --auth_tokens_file or --tls_client_ca "
          "logs a warning: anyone who reaches the port may use the server.");
ABSL_FLAG(int32_t, port, 50051, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(int32_t, metrics_port, 9090,
          "HTTP port of /metrics (Prometheus), /healthz and /readyz; 0 picks a free one, -1 "
          "turns the HTTP server off.");
ABSL_FLAG(int32_t, http_port, 8000,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
          "/v1/models, /v1/sessions; docs/openai.md), with the gRPC API's auth tokens and "
          "limits; 0 picks a free one, -1 turns it off.");
// Default: 1024.
ABSL_FLAG(int32_t, http_max_connections, 1024,
          "Most connections the HTTP API holds open at once, in [1, 1048576]; one beyond it is "
          "answered 503 and closed. Bounds the API's share of the open-files limit, which the "
          "server raises to its maximum.");
// Default: 30s.
ABSL_FLAG(absl::Duration, http_request_deadline, absl::Seconds(30),
          "Time an HTTP API request may take from its first byte until its headers and body are "
          "in, in [1s, 1h]; one still incomplete then is closed, however steadily it trickles. "
          "Also how long a refused request's body is read and discarded.");
ABSL_FLAG(std::string, served_model_name, "",
          "The model's id in the HTTP API (/v1/models, and the \"model\" every request must "
          "name). Empty: the model directory's name.");
ABSL_FLAG(std::string, port_file, "",
          "Once the listeners are bound, write \"grpc_port=N\", \"metrics_port=N\" and "
          "\"http_port=N\" lines to this file atomically (for supervisors and tests using port 0); "
          "it is removed at start "
          "(never read) and on every exit but a crash. Empty: none.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain. With --tls_key, gRPC is served over TLS; neither: plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key matching --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "With TLS: PEM CA certificates that must have signed every client's certificate "
          "(mutual TLS). Empty: clients need no certificate.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File whose contents (surrounding whitespace trimmed) are a bearer token every "
          "linserve.v1 call must send as \"authorization: Bearer <token>\" metadata; health "
          "checks and reflection are exempt. Its callers are one tenant (the default one). "
          "Empty: no such token.");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "File of \"<tenant> <token>\" lines (blank and # lines ignored; tenant names of "
          "A-Z a-z 0-9 . _ -, at most 128): every linserve.v1 call must send one of the tokens "
          "as \"authorization: Bearer <token>\" (with --tls_client_ca, a call sending none is "
          "the tenant named by its certificate's subject), and a tenant reaches only its own "
          "sessions. Combines with --auth_token_file. Empty: no tenants by token.");
ABSL_FLAG(bool, reflection, true, "Serve gRPC server reflection (for grpcurl and grpc_cli).");
ABSL_FLAG(std::string, state_dir, "",
          "Sessions persist here, one file each, written behind every change (a client hears a "
          "request or session operation is done once it is on disk, so a crash or SIGKILL loses "
          "no completed request); at start they are restored with every field. Created if "
          "missing; an unusable directory stops the start. Empty: sessions end with the "
          "process.");
ABSL_FLAG(absl::Duration, drain_deadline, absl::Seconds(30),
          "On SIGTERM/SIGINT: how long queued and running requests may go on before they are "
          "cancelled (they end with finish_reason CANCELLED).");
ABSL_FLAG(int64_t, state_memory_mib, 1024,
          "Memory for the pool of session state slots, MiB; slots = min(--max_slots, this / "
          "state bytes per session). Sessions beyond the pool hibernate to host memory.");
ABSL_FLAG(int32_t, max_slots, 1024, "Most state slots, whatever --state_memory_mib allows.");
ABSL_FLAG(int32_t, max_batch_size, 64, "Most sessions decoded together in one step.");
ABSL_FLAG(int32_t, prefill_token_budget, 0,
          "While sessions stream tokens, the least number of prompt tokens a step feeds (with "
          "--prefill_tokens_per_decode_row, the budget is the larger of the two): what a "
          "streaming session's next token may wait for, and what the earliest prompt gets per "
          "step at worst. 0 = the device's default (cpu 32, cuda 256).");
ABSL_FLAG(int32_t, prefill_tokens_per_decode_row, -1,
          "While sessions stream, a step's prompt budget grows to this many tokens per session "
          "it decodes, keeping the prompt work a step adds in proportion to its decode work "
          "(larger: prompts finish sooner, streams stutter more). 0: the budget is "
          "--prefill_token_budget. -1 = the device's default (cpu 1, cuda 8).");
ABSL_FLAG(int32_t, idle_prefill_token_budget, 0,
          "Most prompt tokens a step feeds when no session is streaming: large, so that long "
          "prompts go at the backend's full speed; a request arriving meanwhile waits for at "
          "most one such step. At least the prompt budget. 0 = the device's default (cpu 2048, "
          "cuda 8192).");
ABSL_FLAG(int32_t, prefill_chunk_size, 64,
          "Tokens per chunk of the backend's chunked-parallel prefill attention (cpu: up to "
          "4096, cuda: up to 128).");
ABSL_FLAG(int32_t, threads, 0, "CPU threads for the CPU backend; 0 = every core.");
ABSL_FLAG(int32_t, emitter_threads, 2,
          "Threads that hand tokens to the clients' streams, so that the engine thread never "
          "waits on a transport; each request's output on one of them, in order. In [0, 64]; 0 "
          "= on the engine thread.");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "Requests and session operations that may wait for the engine; more are refused at "
          "once with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_sessions, 4096,
          "Most named sessions (in a slot, in host memory or on disk) held at once.");
ABSL_FLAG(int64_t, host_state_memory_mib, 4096,
          "Host memory for sessions not in a state slot, MiB (0 to 16777216). With --state_dir "
          "the least recently used idle sessions beyond it leave memory for the disk (a small "
          "index entry stays; the session is read back on its next use). Without one it is a "
          "hard limit: a hibernation, create, fork or import that does not fit fails with "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, session_idle_timeout, absl::Hours(1),
          "Sessions unused this long are deleted; \"inf\" keeps them forever.");
ABSL_FLAG(int64_t, prefix_cache_mib, 1024,
          "Host memory for cached prefix states, MiB: a request without a session_id (or a "
          "session's first) starts from the longest cached prefix of its tokens and reads only "
          "the rest. Least recently used states are evicted. 0 turns prefix reuse off.");
ABSL_FLAG(int32_t, prefix_checkpoint_interval, 1024,
          "Tokens between two prefix states cached inside one long prompt (besides those at "
          "the end of every prompt and request); 0: only those.");
ABSL_FLAG(int32_t, prefix_min_tokens, 32, "Shortest prefix worth caching or reusing, tokens.");
ABSL_FLAG(std::string, prefix_disk_dir, "",
          "Directory for prefix states evicted from --prefix_cache_mib: they are written there "
          "and read back when a request needs one. This server's alone, cleared at start (a "
          "cache, not state). Empty: evicted states are forgotten.");
ABSL_FLAG(int64_t, prefix_disk_mib, 4096,
          "Disk the prefix states in --prefix_disk_dir may take, MiB (least recently written "
          "dropped first).");
ABSL_FLAG(int32_t, session_checkpoints, 8,
          "Turn boundaries each session keeps for RewindSession and ForkSession(num_tokens), "
          "the newest; 0 keeps none (a session can still be rewound to 0).");
ABSL_FLAG(int64_t, session_checkpoint_mib, 1024,
          "Host memory all sessions' turn boundaries may hold, MiB; the oldest go first.");
// Default: 0 (a fair share among the tenants FairShareTenants counts), as for the other three.
ABSL_FLAG(int32_t, tenant_max_sessions, 0,
          "Named sessions one tenant may hold at once, in [0, --max_sessions]; beyond it its "
          "CreateSession, ForkSession and ImportSession fail with RESOURCE_EXHAUSTED naming this "
          "flag. 0 = a fair share: --max_sessions / the number of tenants the token files name "
          "(at least 1), or --max_sessions alone when they name at most one.");
// Default: 0 (a fair share).
ABSL_FLAG(int32_t, tenant_max_queued, 0,
          "Requests and session operations of one tenant that may wait for the engine, in [0, "
          "--max_queue_depth]; more are refused at once with RESOURCE_EXHAUSTED naming this "
          "flag. 0 = a fair share of --max_queue_depth, as for --tenant_max_sessions.");
// Default: 0 (a fair share).
ABSL_FLAG(int64_t, tenant_prefix_cache_mib, 0,
          "Host memory one tenant's cached prefix states may hold, MiB, in [0, "
          "--prefix_cache_mib]; a tenant beyond it evicts its own least recently used states "
          "first. 0 = a fair share of --prefix_cache_mib, as for --tenant_max_sessions.");
// Default: 0 (a fair share).
ABSL_FLAG(int64_t, tenant_session_checkpoint_mib, 0,
          "Host memory the turn boundaries of one tenant's sessions may hold, MiB, in [0, "
          "--session_checkpoint_mib]; a tenant beyond it loses its own oldest first. 0 = a fair "
          "share of --session_checkpoint_mib, as for --tenant_max_sessions.");
ABSL_FLAG(int32_t, max_new_tokens, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int32_t, max_prompt_tokens, 65536, "Most prompt tokens one request may feed.");
ABSL_FLAG(int64_t, max_prompt_bytes, 0,
          "Longest text prompt (and Tokenize text), bytes, refused before any tokenizing so "
          "that an oversized text costs nothing (tokenizing also stops once "
          "--max_prompt_tokens is passed). 0 = derived: 16 x --max_prompt_tokens (1 MiB by "
          "default), 16 bytes per token being generous for real text (SentencePiece pieces "
          "are at most 16 characters by default; English averages about 4 bytes per token). "
          "gRPC refuses any message over 4 MiB before this check.");
ABSL_FLAG(int32_t, max_stop_strings, 16, "Most stop strings per request.");
ABSL_FLAG(int32_t, max_stop_string_bytes, 256, "Longest stop string, bytes.");
ABSL_FLAG(int32_t, max_stop_token_ids, 64, "Most stop token ids per request.");
ABSL_FLAG(int32_t, max_top_logprobs, 20, "Largest top_logprobs per request, in [1, 20].");
ABSL_FLAG(int32_t, max_choices, 16,
          "Largest n (choices generated from one prompt, admitted together) per request, >= 1.");
// Structured output (ConstraintLimits; docs/server.md "Structured output").
ABSL_FLAG(int32_t, constraint_max_text_bytes, 65536,
          "Longest constraint text (a JSON schema, regex or grammar; response_format's schema), "
          "bytes, in [1, 16777216].");
ABSL_FLAG(int32_t, constraint_max_grammar_elements, 262144,
          "Most elements of a constraint's compiled byte-level grammar (every repetition "
          "expanded, every character class spelled out as UTF-8 byte ranges), in [1, 67108864]: "
          "bounds what compiling one constraint may cost.");
ABSL_FLAG(int32_t, constraint_max_nesting_depth, 64,
          "Deepest nesting of a JSON schema, of a regex's groups and of a grammar's parentheses, "
          "in [1, 1024].");
ABSL_FLAG(int32_t, constraint_max_matcher_stacks, 1024,
          "Most parse stacks a constrained document may need at once (the live alternatives of "
          "an ambiguous grammar), in [1, 1048576]; a request needing more fails with "
          "RESOURCE_EXHAUSTED. Bounds the engine thread's work per token.");
ABSL_FLAG(int32_t, constraint_cache_entries, 64,
          "Compiled constraints kept for reuse (the least recently used go first), in [1, "
          "65536]: a schema sent with every request compiles once.");
ABSL_FLAG(int32_t, constraint_max_cached_masks, 4096,
          "Token masks each compiled constraint keeps (one per grammar state met), in [1, "
          "16777216]; each is vocab_size / 8 bytes.");
ABSL_FLAG(std::string, log_level, "info", "Log level: trace, debug, info, warn or error.");

namespace linserve {
namespace {

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: cannot read \"", path,
                                                   "\""));
  }
  std::string token = out.str();
  const size_t begin = token.find_first_not_of(" \t\r\n");
  const size_t end = token.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file: \"", path, "\" holds no token"));
  }
  return token.substr(begin, end - begin + 1);
}

// The tenant quota flags, each in [0, its global limit] (0: a fair share, set later).
absl::Status ApplyTenantQuotaFlags(EngineOptions& o) {
  const int32_t sessions = absl::GetFlag(FLAGS_tenant_max_sessions);
  if (sessions < 0 || sessions > o.sessions.max_sessions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tenant_max_sessions must be in [0, --max_sessions = ", o.sessions.max_sessions,
        "] (0: a fair share), got ", sessions));
  }
  o.sessions.tenant_max_sessions = sessions;
  const int32_t queued = absl::GetFlag(FLAGS_tenant_max_queued);
  if (queued < 0 || queued > o.max_queue_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant_max_queued must be in [0, --max_queue_depth = ", o.max_queue_depth,
                     "] (0: a fair share), got ", queued));
  }
  o.tenant_max_queued = queued;
  const int64_t prefix_mib = absl::GetFlag(FLAGS_tenant_prefix_cache_mib);
  if (prefix_mib < 0 || prefix_mib > (o.prefix.memory_budget_bytes >> 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant_prefix_cache_mib must be in [0, --prefix_cache_mib = ",
                     o.prefix.memory_budget_bytes >> 20, "] (0: a fair share), got ", prefix_mib));
  }
  o.prefix.tenant_budget_bytes = prefix_mib << 20;
  const int64_t boundary_mib = absl::GetFlag(FLAGS_tenant_session_checkpoint_mib);
  if (boundary_mib < 0 || boundary_mib > (o.turn_boundaries.memory_budget_bytes >> 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tenant_session_checkpoint_mib must be in [0, --session_checkpoint_mib = ",
                     o.turn_boundaries.memory_budget_bytes >> 20, "] (0: a fair share), got ",
                     boundary_mib));
  }
  o.turn_boundaries.tenant_budget_bytes = boundary_mib << 20;
  return absl::OkStatus();
}

// The --constraint_* flags. ValidateConstraintLimits's errors name the field
// ("constraint limit max_text_bytes must be in ..."): they are given the flag's name instead.
absl::Status ApplyConstraintFlags(ConstraintLimits& limits) {
  limits.max_text_bytes = absl::GetFlag(FLAGS_constraint_max_text_bytes);
  limits.max_grammar_elements = absl::GetFlag(FLAGS_constraint_max_grammar_elements);
  limits.max_nesting_depth = absl::GetFlag(FLAGS_constraint_max_nesting_depth);
  limits.max_matcher_stacks = absl::GetFlag(FLAGS_constraint_max_matcher_stacks);
  limits.cache_entries = absl::GetFlag(FLAGS_constraint_cache_entries);
  limits.max_cached_masks = absl::GetFlag(FLAGS_constraint_max_cached_masks);
  const absl::Status status = ValidateConstraintLimits(limits);
  if (status.ok()) return status;
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, "constraint limit ");
  return absl::InvalidArgumentError(absl::StrCat("--constraint_", message));
}

// The prefill flags' ranges, checked before the model loads.
absl::Status CheckSchedulerFlags() {
  const int32_t budget = absl::GetFlag(FLAGS_prefill_token_budget);
  const int32_t per_row = absl::GetFlag(FLAGS_prefill_tokens_per_decode_row);
  const int32_t idle = absl::GetFlag(FLAGS_idle_prefill_token_budget);
  if (budget < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefill_token_budget must be >= 1, or 0 for the device's default; got ", budget));
  }
  if (per_row < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill_tokens_per_decode_row must be >= 0, or -1 for the device's "
                     "default; got ",
                     per_row));
  }
  if (idle < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--idle_prefill_token_budget must be >= 1, or 0 for the device's default; got ", idle));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplySchedulerFlags(DeviceKind device, SchedulerLimits& limits) {
  const SchedulerLimits defaults = SchedulerDefaults(device);
  const int32_t budget = absl::GetFlag(FLAGS_prefill_token_budget);
  const int32_t per_row = absl::GetFlag(FLAGS_prefill_tokens_per_decode_row);
  const int32_t idle = absl::GetFlag(FLAGS_idle_prefill_token_budget);
  limits.prefill_token_budget = budget == 0 ? defaults.prefill_token_budget : budget;
  limits.prefill_tokens_per_decode_row =
      per_row == -1 ? defaults.prefill_tokens_per_decode_row : per_row;
  limits.idle_prefill_token_budget =
      idle == 0 ? std::max(defaults.idle_prefill_token_budget, limits.prefill_token_budget) : idle;
  if (limits.idle_prefill_token_budget < limits.prefill_token_budget) {
    return absl::InvalidArgumentError(
        absl::StrCat("--idle_prefill_token_budget (", limits.idle_prefill_token_budget,
                     ") must be >= --prefill_token_budget (", limits.prefill_token_budget, ")"));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<EngineOptions> EngineOptionsFromFlags() {
  EngineOptions o;
  o.scheduler.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  if (absl::Status s = CheckSchedulerFlags(); !s.ok()) return s;
  o.sessions.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  o.sessions.idle_timeout = absl::GetFlag(FLAGS_session_idle_timeout);
  o.sessions.host_state_memory_mib = absl::GetFlag(FLAGS_host_state_memory_mib);
  o.requests.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  o.requests.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.requests.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  if (o.requests.max_prompt_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_prompt_bytes must be >= 0 (0 = derived), got ", o.requests.max_prompt_bytes));
  }
  if (o.requests.max_prompt_bytes == 0) {
    o.requests.max_prompt_bytes =
        kDefaultPromptBytesPerToken * std::max<int64_t>(o.requests.max_prompt_tokens, 0);
  }
  o.requests.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  o.requests.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  o.requests.max_stop_token_ids = absl::GetFlag(FLAGS_max_stop_token_ids);
  o.requests.max_top_logprobs = absl::GetFlag(FLAGS_max_top_logprobs);
  o.requests.max_choices = absl::GetFlag(FLAGS_max_choices);
  o.max_queue_depth = absl::GetFlag(FLAGS_max_queue_depth);
  o.emitter_threads = absl::GetFlag(FLAGS_emitter_threads);
  o.state_dir = absl::GetFlag(FLAGS_state_dir);
  // Up to 2^30 MiB (1 PiB): no overflow in bytes.
  constexpr int64_t kMaxMib = int64_t{1} << 30;
  const int64_t prefix_mib = absl::GetFlag(FLAGS_prefix_cache_mib);
  if (prefix_mib < 0 || prefix_mib > kMaxMib) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefix_cache_mib must be in [0, 2^30] (0 turns prefix reuse off), got ", prefix_mib));
  }
  o.prefix.memory_budget_bytes = prefix_mib << 20;
  o.prefix.checkpoint_interval = absl::GetFlag(FLAGS_prefix_checkpoint_interval);
  if (o.prefix.checkpoint_interval < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix_checkpoint_interval must be >= 0 (0: turn boundaries only), got ",
                     o.prefix.checkpoint_interval));
  }
  o.prefix.min_tokens = absl::GetFlag(FLAGS_prefix_min_tokens);
  if (o.prefix.min_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix_min_tokens must be >= 1, got ", o.prefix.min_tokens));
  }
  o.prefix.disk_dir = absl::GetFlag(FLAGS_prefix_disk_dir);
  const int64_t prefix_disk_mib = absl::GetFlag(FLAGS_prefix_disk_mib);
  if (prefix_disk_mib < 1 || prefix_disk_mib > kMaxMib) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix_disk_mib must be in [1, 2^30], got ", prefix_disk_mib));
  }
  o.prefix.disk_budget_bytes = prefix_disk_mib << 20;
  o.turn_boundaries.per_session = absl::GetFlag(FLAGS_session_checkpoints);
  if (o.turn_boundaries.per_session < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_checkpoints must be >= 0 (0 keeps none), got ",
                     o.turn_boundaries.per_session));
  }
  const int64_t boundary_mib = absl::GetFlag(FLAGS_session_checkpoint_mib);
  if (boundary_mib < 0 || boundary_mib > kMaxMib) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_checkpoint_mib must be in [0, 2^30], got ", boundary_mib));
  }
  o.turn_boundaries.memory_budget_bytes = boundary_mib << 20;
  if (absl::Status s = ApplyTenantQuotaFlags(o); !s.ok()) return s;
  if (absl::Status s = ApplyConstraintFlags(o.constraint_limits); !s.ok()) return s;
  return o;
}

absl::StatusOr<BackendOptions> BackendOptionsFromFlags() {
  BackendOptions o;
  const int64_t mib = absl::GetFlag(FLAGS_state_memory_mib);
  if (mib < 1 || mib > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_memory_mib must be in [1, 2^30], got ", mib));
  }
  o.state_memory_budget_bytes = mib << 20;
  o.max_slots = absl::GetFlag(FLAGS_max_slots);
  o.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  o.prefill_chunk_size = absl::GetFlag(FLAGS_prefill_chunk_size);
  o.num_threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<WeightPrecision> precision =
      ParseWeightPrecision(absl::GetFlag(FLAGS_weight_precision));
  if (!precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", precision.status().message()));
  }
  o.weight_precision = *precision;
  absl::StatusOr<StatePrecision> state_precision =
      ParseStatePrecision(absl::GetFlag(FLAGS_state_precision));
  if (!state_precision.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", state_precision.status().message()));
  }
  o.state_precision = *state_precision;
  return o;
}

}  // namespace

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions o;
  const std::string level = absl::GetFlag(FLAGS_log_level);
  o.log_level = spdlog::level::from_str(level);
  if (o.log_level == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_level: \"", level, "\" is not one of trace, debug, info, warn, error"));
  }
  absl::StatusOr<EngineOptions> engine = EngineOptionsFromFlags();
  if (!engine.ok()) return engine.status();
  o.engine = *std::move(engine);
  absl::StatusOr<BackendOptions> backend = BackendOptionsFromFlags();
  if (!backend.ok()) return backend.status();
  o.backend = *std::move(backend);
  absl::StatusOr<DeviceSelection> device = ParseDeviceSelection(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return device.status();
  o.device = *device;
  o.model_dir = absl::GetFlag(FLAGS_model);
  o.host = absl::GetFlag(FLAGS_host);
  const int32_t port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port must be in [0, 65535], got ", port));
  }
  o.http_port = absl::GetFlag(FLAGS_http_port);
  if (o.http_port < -1 || o.http_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_port must be in [0, 65535], or -1 (off), got ", o.http_port));
  }
  o.http_max_connections = absl::GetFlag(FLAGS_http_max_connections);
  if (o.http_max_connections < 1 || o.http_max_connections > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_max_connections must be in [1, 1048576], got ", o.http_max_connections));
  }
  o.http_request_deadline = absl::GetFlag(FLAGS_http_request_deadline);
  if (o.http_request_deadline < absl::Seconds(1) || o.http_request_deadline > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_request_deadline must be in [1s, 1h], got ",
                     absl::FormatDuration(o.http_request_deadline)));
  }
  o.metrics_port = std::max(absl::GetFlag(FLAGS_metrics_port), -1);
  o.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.drain_deadline = absl::GetFlag(FLAGS_drain_deadline);

  o.grpc.address = absl::StrCat(o.host, ":", port);
  o.grpc.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.grpc.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.grpc.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  o.grpc.reflection = absl::GetFlag(FLAGS_reflection);
  // Room for the largest prompt text plus the rest of a GenerateRequest (stop strings, ids).
  o.grpc.max_receive_message_bytes = static_cast<int32_t>(std::clamp<int64_t>(
      o.engine.requests.max_prompt_bytes + (int64_t{1} << 20), int64_t{4} << 20,
      std::numeric_limits<int32_t>::max()));
  o.auth.certificate_principals = !o.grpc.tls_client_ca_file.empty();
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ReadToken(path);
    if (!token.ok()) return token.status();
    o.auth.auth_token = *std::move(token);
  }
  if (const std::string path = absl::GetFlag(FLAGS_auth_tokens_file); !path.empty()) {
    absl::StatusOr<std::vector<TenantToken>> tokens = ReadTenantTokensFile(path);
    if (!tokens.ok()) {
      return absl::Status(tokens.status().code(),
                          absl::StrCat("--auth_tokens_file: ", tokens.status().message()));
    }
    o.auth.tenant_tokens = *std::move(tokens);
  }
  return o;
}

bool DefinesServerFlags(absl::string_view path) {
  return absl::EndsWith(path, "server/options.cc");
}

}  // namespace linserve
