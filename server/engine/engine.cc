#include "server/engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/sessions/snapshot.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

// A session owner as logs name it: the tenant, or "the default tenant" without authentication.
std::string TenantForLog(absl::string_view owner) {
  return owner.empty() ? std::string("the default tenant") : absl::StrCat("tenant ", owner);
}

constexpr absl::Duration kExpiryInterval = absl::Seconds(1);
// How long an idle engine thread sleeps before checking for expired sessions.
constexpr absl::Duration kIdleWait = absl::Milliseconds(500);

// The engine whose thread this is (nullptr on any other thread).
thread_local const Engine* current_engine = nullptr;

std::vector<double> LatencyBuckets() { return ExponentialBuckets(0.0005, 2, 18); }  // 0.5 ms..65 s
std::vector<double> SizeBuckets() { return ExponentialBuckets(1, 2, 14); }          // 1..8192

size_t DecodeRows(const EngineOptions& options) {
  return static_cast<size_t>(std::max(options.scheduler.max_batch_size, 1));
}

}  // namespace

void ApplyFairTenantShares(int32_t tenants, EngineOptions& options) {
  if (tenants <= 1) return;
  const auto share = [tenants](auto limit) -> decltype(limit) {
    return limit == 0 ? 0 : std::max<decltype(limit)>(1, limit / tenants);
  };
  int32_t& sessions = options.sessions.tenant_max_sessions;
  if (sessions == 0) sessions = share(options.sessions.max_sessions);
  if (options.tenant_max_queued == 0) options.tenant_max_queued = share(options.max_queue_depth);
  int64_t& prefix = options.prefix.tenant_budget_bytes;
  if (prefix == 0) prefix = share(options.prefix.memory_budget_bytes);
  int64_t& boundaries = options.session_checkpoints.tenant_budget_bytes;
  if (boundaries == 0) boundaries = share(options.session_checkpoints.memory_budget_bytes);
}

Engine::Engine(const Model& model, std::unique_ptr<Backend> backend,
               std::unique_ptr<SessionPersister> persister,
               std::unique_ptr<PrefixDisk> prefix_disk, const EngineOptions& options,
               MetricsRegistry& metrics)
    : model_(model),
      options_(options),
      backend_(std::move(backend)),
      device_(backend_->device()),
      slot_capacity_(backend_->slot_capacity()),
      persister_(std::move(persister)),
      store_(*backend_, options.sessions, persister_.get()),
      prefix_disk_(std::move(prefix_disk)),
      prefix_(options.prefix, model.fingerprint, /*extend=*/nullptr, prefix_disk_.get()),
      boundaries_(options.session_checkpoints),
      decode_steps_{DecodeStep(DecodeRows(options)), DecodeStep(DecodeRows(options))},
      prefill_sample_(DecodeRows(options)),
      m_{
          metrics.GetCounter("linserve_engine_steps_total",
                             "Engine steps that ran the model (one decode batch and/or prefill "
                             "chunks)"),
          metrics.GetCounter("linserve_prompt_tokens_total",
                             "Prompt tokens of requests, BOS included (cached prefix tokens too: "
                             "see linserve_prefix_tokens_saved_total)"),
          metrics.GetCounter("linserve_generated_tokens_total",
                             "Tokens sampled and sent to clients"),
          metrics.GetCounter("linserve_session_hibernations_total",
                             "Sessions moved from a state slot to host memory to free the slot"),
          metrics.GetCounter("linserve_sessions_expired_total",
                             "Sessions deleted after the idle timeout"),
          metrics.GetCounter("linserve_generations_total", "Generations by outcome",
                             {{"outcome", "length"}}),
          metrics.GetCounter("linserve_generations_total", "Generations by outcome",
                             {{"outcome", "stop"}}),
          metrics.GetCounter("linserve_generations_total", "Generations by outcome",
                             {{"outcome", "eos"}}),
          metrics.GetCounter("linserve_generations_total", "Generations by outcome",
                             {{"outcome", "cancelled"}}),
          metrics.GetCounter("linserve_generations_total", "Generations by outcome",
                             {{"outcome", "error"}}),
          metrics.GetHistogram("linserve_decode_batch_size", "Sessions per decode step",
                               SizeBuckets()),
          metrics.GetHistogram("linserve_prefill_chunk_tokens",
                               "Prompt tokens per prefill chunk (one session's share of a step)",
                               SizeBuckets()),
          metrics.GetHistogram("linserve_prefill_step_tokens",
                               "Prompt tokens per engine step that fed any (one batched prefill)",
                               SizeBuckets()),
          metrics.GetHistogram("linserve_time_to_first_token_seconds",
                               "From accepting a request to its first sampled token",
                               LatencyBuckets()),
          metrics.GetHistogram("linserve_inter_token_latency_seconds",
                               "Between consecutive tokens of one request", LatencyBuckets()),
          metrics.GetGauge("linserve_queue_depth",
                           "Requests and session operations waiting for the engine"),
          metrics.GetGauge("linserve_active_requests", "Generations holding a state slot"),
          metrics.GetGauge("linserve_free_slots", "Free state slots"),
          metrics.GetGauge("linserve_slot_capacity", "State slots in the pool"),
          metrics.GetGauge("linserve_sessions", "Sessions by residency", {{"state", "resident"}}),
          metrics.GetGauge("linserve_sessions", "Sessions by residency", {{"state", "hibernated"}}),
          metrics.GetGauge("linserve_sessions", "Sessions by residency", {{"state", "ephemeral"}}),
          metrics.GetCounter("linserve_prefix_hits_total",
                             "Requests started from a cached prefix state"),
          metrics.GetCounter("linserve_prefix_misses_total",
                             "Requests that could use a cached prefix and found none, by reason",
                             {{"reason", "no_prefix"}}),
          metrics.GetCounter("linserve_prefix_misses_total",
                             "Requests that could use a cached prefix and found none, by reason",
                             {{"reason", "evicted"}}),
          metrics.GetCounter("linserve_prefix_misses_total",
                             "Requests that could use a cached prefix and found none, by reason",
                             {{"reason", "too_short"}}),
          metrics.GetCounter("linserve_prefix_tokens_saved_total",
                             "Prompt tokens not re-read thanks to cached prefix states"),
          metrics.GetCounter("linserve_prefix_checkpoints_total",
                             "Prefix states stored (turn boundaries and inside long prefills)"),
          metrics.GetCounter("linserve_prefix_evictions_total",
                             "Prefix states evicted for the memory budget"),
          metrics.GetGauge("linserve_prefix_bytes", "Host memory held by cached prefix states"),
          metrics.GetGauge("linserve_prefix_states", "Cached prefix states"),
          metrics.GetGauge("linserve_session_checkpoint_bytes",
                           "Host memory held by sessions' turn boundaries (RewindSession)"),
          metrics.GetCounter("linserve_session_evictions_to_disk_total",
                             "Idle sessions moved from host memory to disk "
                             "(--host_state_memory_mib), their files already written"),
          metrics.GetCounter("linserve_session_loads_from_disk_total",
                             "Sessions read back from state_dir: used after an eviction, or "
                             "written by another server sharing the directory"),
          metrics.GetGauge("linserve_session_host_memory_bytes",
                           "Host memory charged for sessions out of their slots "
                           "(--host_state_memory_mib)"),
          metrics.GetGauge("linserve_sessions_on_disk",
                           "Hibernated sessions held only on disk (an index entry in memory)"),
          metrics.GetGauge("linserve_prefix_disk_bytes",
                           "Bytes of prefix states on the disk tier (--prefix_disk_dir)"),
          metrics.GetGauge("linserve_prefix_disk_states", "Prefix states on the disk tier"),
          metrics.GetCounter("linserve_prefix_disk_reads_total",
                             "Prefix states read back from the disk tier by a lookup"),
          metrics.GetCounter("linserve_tenant_quota_rejections_total",
                             "Calls refused because their tenant reached its quota, by quota",
                             {{"quota", "tenant_max_sessions"}}),
          metrics.GetCounter("linserve_tenant_quota_rejections_total",
                             "Calls refused because their tenant reached its quota, by quota",
                             {{"quota", "tenant_max_queued"}}),
      } {
  // A session another server replaced has another history: its turn boundaries are not its.
  store_.set_on_replaced([this](const SessionId& id) { boundaries_.Erase(id); });
  const size_t rows = DecodeRows(options);
  finished_.reserve(rows);
  plan_.decode.reserve(rows);
  plan_.prefill.reserve(rows);
  prefill_items_.reserve(rows);
  prefill_jobs_.reserve(rows);
}

Engine::DecodeStep::DecodeStep(size_t rows)
    : tokens(rows), logprobs(rows), top_logprobs(rows * kMaxTopLogprobs) {
  items.reserve(rows);
  jobs.reserve(rows);
}

SampleOutput Engine::DecodeStep::Output(size_t rows) {
  return {.tokens = absl::MakeSpan(tokens).subspan(0, rows),
          .logprobs = absl::MakeSpan(logprobs).subspan(0, rows),
          .top_logprobs = absl::MakeSpan(top_logprobs).subspan(0, rows * kMaxTopLogprobs)};
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model,
                                                       std::unique_ptr<Backend> backend,
                                                       const EngineOptions& options,
                                                       MetricsRegistry& metrics) {
  if (absl::Status s = ValidateSchedulerLimits(options.scheduler); !s.ok()) return s;
  if (absl::Status s = ValidateSessionStoreOptions(options.sessions); !s.ok()) return s;
  if (absl::Status s = ValidateRequestLimits(options.requests); !s.ok()) return s;
  if (absl::Status s = ValidatePrefixStoreOptions(options.prefix); !s.ok()) return s;
  if (absl::Status s = ValidateSessionCheckpointOptions(options.session_checkpoints); !s.ok()) {
    return s;
  }
  if (options.max_queue_depth < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_depth must be >= 1, got ", options.max_queue_depth));
  }
  if (options.tenant_max_queued < 0 || options.tenant_max_queued > options.max_queue_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant_max_queued must be in [0, max_queue_depth = ", options.max_queue_depth,
                     "] (0: max_queue_depth alone), got ", options.tenant_max_queued));
  }
  if (backend == nullptr) return absl::InvalidArgumentError("engine needs a backend");
  if (backend->config().vocab_size != model.config.vocab_size ||
      backend->config().StateFloatsPerSlot() != model.config.StateFloatsPerSlot()) {
    return absl::InvalidArgumentError("the backend runs a different model than the one given");
  }
  std::unique_ptr<SessionPersister> persister;
  if (!options.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<SessionPersister>> opened = SessionPersister::Open(
        {.dir = options.state_dir,
         .batch_interval = options.state_write_interval,
         .file_system = options.file_system,
         .write_errors = &metrics.GetCounter(
             "linserve_state_write_errors_total",
             "Session files that could not be written to or removed from state_dir (each "
             "failure counted; the requests whose change it was fail)")},
        model.config, model.fingerprint, options.requests.max_prompt_tokens);
    if (!opened.ok()) return opened.status();
    persister = *std::move(opened);
  }
  std::unique_ptr<PrefixDisk> prefix_disk;
  if (options.prefix.memory_budget_bytes > 0 && !options.prefix.disk_dir.empty()) {
    absl::StatusOr<std::unique_ptr<PrefixDisk>> opened =
        PrefixDisk::Open({.dir = options.prefix.disk_dir,
                          .budget_bytes = options.prefix.disk_budget_bytes,
                          .file_system = options.file_system});
    if (!opened.ok()) return opened.status();
    prefix_disk = *std::move(opened);
  }
  std::unique_ptr<Engine> engine(new Engine(model, std::move(backend), std::move(persister),
                                            std::move(prefix_disk), options, metrics));
  if (engine->persister_ != nullptr) {
    const absl::Time start = absl::Now();
    const int64_t restored = engine->store_.Restore(start);
    engine->store_.SettleLocks();
    spdlog::info("state_dir {}: restored {} sessions in {:.1f} ms", options.state_dir, restored,
                 absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  engine->PublishStats();
  engine->thread_ = std::thread([e = engine.get()] { e->Run(); });
  return engine;
}

Engine::~Engine() {
  if (absl::Status s = Shutdown(absl::ZeroDuration()); !s.ok()) {
    spdlog::error("engine shutdown: {}", s.ToString());
  }
}

// ---- Inbox ---------------------------------------------------------------------------------

absl::Status Engine::Post(Op op, bool is_request, const std::string& owner) {
  absl::Status rejected;
  {
    absl::MutexLock lock(&mu_);
    auto mine = queued_by_owner_.find(owner);
    if (draining_) {
      rejected = absl::UnavailableError("the server is shutting down and accepts no new work");
    } else if (options_.tenant_max_queued > 0 && mine != queued_by_owner_.end() &&
               mine->second >= options_.tenant_max_queued) {
      rejected = absl::ResourceExhaustedError(absl::StrCat(
          "this tenant's queue quota is full: tenant_max_queued (", options_.tenant_max_queued,
          ") of its requests and operations are already waiting; retry later"));
      m_.tenant_max_queued_rejections.Increment();
    } else if (queued_requests_ + queued_ops_ >= options_.max_queue_depth) {
      rejected = absl::ResourceExhaustedError(absl::StrCat(
          "the engine queue is full: max_queue_depth (", options_.max_queue_depth,
          ") requests and operations are already waiting; retry later"));
    } else {
      inbox_.push_back(
          Queued{.op = std::move(op),
                 .op_owner = is_request ? std::nullopt : std::optional<std::string>(owner)});
      (is_request ? queued_requests_ : queued_ops_) += 1;
      ++queued_by_owner_[owner];
      return absl::OkStatus();
    }
  }
  std::move(op)(rejected);
  return rejected;
}

void Engine::UnqueueLocked(const std::string& owner) {
  auto mine = queued_by_owner_.find(owner);
  if (--mine->second == 0) queued_by_owner_.erase(mine);
}

void Engine::PostAlways(Op op) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  inbox_.push_back(Queued{.op = std::move(op), .op_owner = std::nullopt});
}

bool Engine::HasInboxLocked() const { return !inbox_.empty(); }

bool Engine::IdleLocked() const {
  return queued_requests_ == 0 && active_requests_ == 0;
}

bool Engine::RunInbox() {
  std::deque<Queued> ops;
  {
    absl::MutexLock lock(&mu_);
    ops.swap(inbox_);
    queued_ops_ = 0;
    for (const Queued& queued : ops) {
      if (queued.op_owner.has_value()) UnqueueLocked(*queued.op_owner);
    }
  }
  for (Queued& queued : ops) {
    std::move(queued.op)(absl::OkStatus());
    store_.SettleLocks();  // at once: a client that heard back may go to another replica next
  }
  return !stop_requested_;
}

// ---- Requests ------------------------------------------------------------------------------

absl::StatusOr<JobId> Engine::Submit(GenerateRequest request, std::shared_ptr<TokenSink> sink) {
  if (absl::Status s = ValidateGenerateRequest(request, options_.requests, model_.config);
      !s.ok()) {
    return s;
  }
  JobId id;
  {
    absl::MutexLock lock(&mu_);
    id = JobId{next_job_id_++};
  }
  const std::string owner = request.owner;
  auto job = std::make_unique<Job>(id, std::move(request), std::move(sink), model_, absl::Now());
  absl::Status posted = Post(
      [this, job = std::move(job)](absl::Status admitted) mutable {
        if (admitted.ok()) Accept(std::move(job));
      },
      /*is_request=*/true, owner);
  if (!posted.ok()) return posted;
  return id;
}

void Engine::Cancel(JobId id) {
  PostAlways([this, id](absl::Status admitted) {
    if (!admitted.ok()) return;
    std::unique_ptr<Job> job = Extract(id);
    if (job != nullptr) {
      Complete(std::move(job), absl::CancelledError("the request was cancelled"),
               FinishReason::kCancelled);
    }
  });
}

void Engine::Accept(std::unique_ptr<Job> job) {
  jobs_[job->id()] = job.get();
  const GenerateRequest& request = job->request();
  if (request.session_id.has_value()) {
    absl::StatusOr<Session*> session = store_.Find(*request.session_id, request.owner);
    if (!session.ok()) {
      Complete(std::move(job), session.status(), FinishReason::kLength);
      return;
    }
    if ((*session)->busy) {
      Complete(std::move(job),
               absl::AbortedError(absl::StrCat(
                   "session ", request.session_id->value, " is busy with request ",
                   (*session)->busy_request_id,
                   "; a session serves one request at a time")),
               FinishReason::kLength);
      return;
    }
    (*session)->busy = true;
    (*session)->busy_request_id = request.request_id;
    job->Bind(*session);
  }
  waiting_.push_back(std::move(job));
}

void Engine::AdmitWaiting() {
  if (waiting_.empty()) return;
  const absl::Time now = absl::Now();
  std::deque<std::unique_ptr<Job>> still_waiting;
  std::vector<std::pair<std::unique_ptr<Job>, absl::Status>> failed;
  while (!waiting_.empty()) {
    std::unique_ptr<Job> job = std::move(waiting_.front());
    waiting_.pop_front();
    absl::Status status;
    if (job->session() == nullptr) {
      absl::StatusOr<Session*> session = store_.CreateEphemeral(now);
      status = session.status();
      if (session.ok()) job->Bind(*session);
    } else {
      status = store_.MakeResident(*job->session(), now);
    }
    if (absl::IsResourceExhausted(status) && store_.SlotWaitHelps()) {
      still_waiting.push_back(std::move(job));  // every slot is busy; retry next step
      continue;
    }
    if (status.ok()) status = job->Activate(options_.requests.max_prompt_tokens);
    if (status.ok()) {
      status = backend_->StartSampling(*job->session()->slot, job->request().sampling,
                                       job->request().top_logprobs, job->new_prompt_tokens());
    }
    if (!status.ok()) {
      failed.emplace_back(std::move(job), status);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      --queued_requests_;
      UnqueueLocked(job->request().owner);
      ++active_requests_;
    }
    m_.prompt_tokens.Increment(job->usage().prompt_tokens);
    active_.push_back(std::move(job));
  }
  waiting_ = std::move(still_waiting);
  for (auto& [job, status] : failed) Complete(std::move(job), status, FinishReason::kLength);
}

std::unique_ptr<Job> Engine::Extract(JobId id) {
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if ((*it)->id() == id) {
      std::unique_ptr<Job> job = std::move(*it);
      active_.erase(it);
      return job;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id() == id) {
      std::unique_ptr<Job> job = std::move(*it);
      waiting_.erase(it);
      return job;
    }
  }
  return nullptr;
}

void Engine::Complete(std::unique_ptr<Job> job, const absl::Status& status, FinishReason reason) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (job->active()) {
      --active_requests_;
    } else {
      --queued_requests_;
      UnqueueLocked(job->request().owner);
    }
  }
  Session* session = job->session();
  const std::string session_name =
      session == nullptr ? "-" : (session->ephemeral ? "ephemeral" : session->id.value);
  DropDecodeRows(*job);
  job->SettleSession();
  // A turn boundary: the state after everything the session consumed. A backend failure
  // leaves it unknown.
  if (job->knows_history() && session != nullptr && session->slot.has_value() &&
      (status.ok() || absl::IsCancelled(status))) {
    if (absl::StatusOr<int64_t> position = backend_->SlotPosition(*session->slot); position.ok()) {
      Checkpoint(*job, *session->slot, *position);
    }
  }
  if (options_.session_checkpoints.per_session > 0 && session != nullptr &&
      !session->ephemeral && session->slot.has_value() &&
      (status.ok() || absl::IsCancelled(status))) {
    if (absl::StatusOr<SessionSnapshot> boundary = store_.Snapshot(*session); boundary.ok()) {
      boundaries_.Add(session->owner, session->id, *std::move(boundary));
    }
  }
  jobs_.erase(job->id());
  const bool named = session != nullptr && !session->ephemeral;
  if (session != nullptr) store_.Release(*session, now);
  absl::AnyInvocable<void(absl::Status) &&> report = job->Report(status, reason, now);
  // Counted and published before the client hears of the end, so that what it sees next is
  // current.
  const Usage& usage = job->usage();
  if (status.ok()) {
    switch (reason) {
      case FinishReason::kLength:
        m_.generations_length.Increment();
        break;
      case FinishReason::kStop:
        m_.generations_stop.Increment();
        break;
      case FinishReason::kEos:
        m_.generations_eos.Increment();
        break;
      case FinishReason::kCancelled:
        m_.generations_cancelled.Increment();
        break;
    }
    spdlog::info(
        "request {} session {}: finished ({}) prompt_tokens={} generated_tokens={} "
        "ttft_ms={:.1f} total_ms={:.1f}",
        job->request().request_id, session_name, ToString(reason), usage.prompt_tokens,
        usage.generated_tokens, absl::ToDoubleMilliseconds(usage.time_to_first_token),
        absl::ToDoubleMilliseconds(usage.total_time));
  } else {
    (absl::IsCancelled(status) ? m_.generations_cancelled : m_.generations_failed).Increment();
    spdlog::info("request {} session {}: ended with {} after {} tokens, total_ms={:.1f}",
                 job->request().request_id, session_name, status.ToString(),
                 usage.generated_tokens, absl::ToDoubleMilliseconds(usage.total_time));
  }
  PublishStats();
  // A client that heard its request end finds the session as it left it, even after a crash;
  // one whose session's change could not be written hears that instead.
  if (named) {
    store_.WhenDurable({session->id}, std::move(report));
  } else {
    store_.SettleLocks();  // a lookup's lock goes back before the client hears of it
    std::move(report)(absl::OkStatus());
  }
}

void Engine::FailOnBackendError(JobId id, const absl::Status& status) {
  std::unique_ptr<Job> job = Extract(id);
  if (job == nullptr) return;
  Session* session = job->session();
  const bool named = session != nullptr && !session->ephemeral;
  spdlog::error("request {}: backend failure: {}", job->request().request_id, status.ToString());
  Complete(std::move(job),
           absl::InternalError(absl::StrCat(
               "the model backend failed: ", status.message(),
               named ? "; the session's state is unknown and the session was deleted" : "")),
           FinishReason::kLength);
  if (named) EraseSession(session);
}

void Engine::CancelAll() {
  std::vector<JobId> ids;
  for (const auto& job : waiting_) ids.push_back(job->id());
  for (const auto& job : active_) ids.push_back(job->id());
  for (JobId id : ids) {
    Complete(Extract(id), absl::OkStatus(), FinishReason::kCancelled);
  }
}

// ---- The loop ------------------------------------------------------------------------------

void Engine::Run() {
  current_engine = this;
  while (RunInbox()) {
    ExpireSessions(absl::Now());
    AdmitWaiting();
    if (!active_.empty() || in_flight_ != nullptr) Step();
    store_.SettleLocks();
    PublishStats();
    if (active_.empty() && in_flight_ == nullptr) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &Engine::HasInboxLocked), kIdleWait);
    }
  }
  // Every job has ended (CancelAll); a step still in flight only has dropped rows.
  if (in_flight_ != nullptr) CollectDecode();
  store_.SettleLocks();
  PublishStats();
}

void Engine::Step() {
  DecodeStep* ready = in_flight_ != nullptr ? CollectDecode() : nullptr;
  views_.clear();
  prefill_leaders_.clear();
  if (prefix_.enabled()) {
    for (const auto& job : active_) {
      const int64_t remaining = job->prefill_remaining();
      if (job->knows_history() && remaining > 0 &&
          remaining < static_cast<int64_t>(job->feed().size())) {
        prefill_leaders_.push_back(job.get());
      }
    }
  }
  for (const auto& job : active_) {
    if (job->prefill_remaining() == 0 && job->sampled_all()) continue;  // ends at its emit
    if (WaitsForPrefix(*job)) continue;
    views_.push_back({job->id(), job->prefill_remaining(), job->last_token_step()});
  }
  PlanStep(views_, options_.scheduler, plan_);
  ++step_;
  m_.steps.Increment();
  // Decode first: the sessions already streaming are the ones a long prompt must not stall.
  if (!plan_.decode.empty()) {
    LaunchDecode(plan_.decode);
    if (in_flight_ != nullptr && !backend_->asynchronous()) ready = CollectDecode();
  }
  if (ready != nullptr) EmitDecoded(*ready);
  if (!plan_.prefill.empty()) RunPrefill(plan_.prefill);
}

void Engine::LaunchDecode(absl::Span<const JobId> batch) {
  const int buffer = next_decode_step_;
  DecodeStep& step = decode_steps_[buffer];
  step.step = step_;
  step.items.clear();
  step.jobs.clear();
  for (JobId id : batch) {
    Job* job = jobs_.at(id);
    job->set_decode_row(buffer, static_cast<int32_t>(step.items.size()));
    step.items.push_back({*job->session()->slot, job->decode_token()});
    step.jobs.push_back(job);
  }
  m_.batch_size.Observe(static_cast<double>(step.items.size()));
  if (absl::Status status =
          backend_->LaunchDecodeAndSample(step.items, step.Output(step.items.size()));
      !status.ok()) {
    for (JobId id : batch) FailOnBackendError(id, status);
    return;
  }
  for (Job* job : step.jobs) job->DecodeDone();
  in_flight_ = &step;
  next_decode_step_ = 1 - buffer;
}

Engine::DecodeStep* Engine::CollectDecode() {
  DecodeStep& step = *in_flight_;
  in_flight_ = nullptr;
  const absl::Status status = backend_->CollectSamples();
  for (size_t i = 0; i < step.jobs.size(); ++i) {
    Job* job = step.jobs[i];
    if (job == nullptr) continue;
    if (status.ok()) {
      job->Sampled(step.tokens[i]);
    } else {
      FailOnBackendError(job->id(), status);
    }
  }
  return status.ok() ? &step : nullptr;
}

void Engine::EmitDecoded(DecodeStep& step) {
  const int buffer = static_cast<int>(&step - decode_steps_.data());
  const absl::Time now = absl::Now();
  finished_.clear();
  for (size_t i = 0; i < step.jobs.size(); ++i) {
    Job* job = step.jobs[i];
    if (job == nullptr) continue;
    job->set_decode_row(buffer, -1);
    job->set_last_token_step(step.step);
    const std::optional<FinishReason> finish =
        EmitSampled(*job, step.tokens[i], step.logprobs[i],
                    absl::MakeConstSpan(step.top_logprobs).subspan(i * kMaxTopLogprobs),
                    now);
    if (job->last_inter_token_latency().has_value()) {
      m_.inter_token_latency.Observe(absl::ToDoubleSeconds(*job->last_inter_token_latency()));
    }
    if (finish.has_value()) finished_.emplace_back(job->id(), *finish);
  }
  for (const auto& [id, reason] : finished_) Complete(Extract(id), absl::OkStatus(), reason);
}

std::optional<FinishReason> Engine::EmitSampled(Job& job, TokenId token, float logprob,
                                                absl::Span<const TokenLogprob> top_logprobs,
                                                absl::Time now) {
  const std::optional<FinishReason> finish = job.Emit(
      token, logprob,
      top_logprobs.subspan(0, static_cast<size_t>(job.request().top_logprobs)), now);
  m_.generated_tokens.Increment();
  return finish;
}

void Engine::DropDecodeRows(Job& job) {
  for (int buffer = 0; buffer < 2; ++buffer) {
    const int32_t row = job.decode_row(buffer);
    if (row < 0) continue;
    DecodeStep& step = decode_steps_[buffer];
    step.jobs[static_cast<size_t>(row)] = nullptr;
    job.set_decode_row(buffer, -1);
    Session* session = job.session();
    if (&step != in_flight_ || session == nullptr || session->ephemeral ||
        !session->slot.has_value()) {
      continue;
    }
    // The backend orders this after the step in flight, whose pick it undoes.
    if (absl::Status s =
            backend_->SetSeenCounts(*session->slot, session->history.SeenCounts());
        !s.ok()) {
      spdlog::error("session {}: restoring the penalty counts failed: {}", session->id.value,
                    s.ToString());
    }
  }
}

void Engine::RunPrefill(absl::Span<const PrefillChunk> chunks) {
  prefill_items_.clear();
  prefill_jobs_.clear();
  size_t sampled = 0;
  int64_t tokens = 0;
  for (const PrefillChunk& chunk : chunks) {
    Job* job = jobs_.at(chunk.id);
    // Looked up at the job's first chunk rather than at admission, so that requests admitted
    // together find what the earlier ones (fed in earlier steps) left.
    if (job->prefill_remaining() == static_cast<int64_t>(job->feed().size())) {
      if (absl::Status s = ReusePrefix(*job); !s.ok()) {
        FailOnBackendError(chunk.id, s);
        continue;
      }
    }
    // A chunk ends at the next prefix checkpoint inside it; the rest goes in the next step.
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(chunk.tokens, NextCheckpoint(*job)));
    // The last chunk of a prompt yields the first token.
    const bool last = n == job->prefill_remaining();
    prefill_items_.push_back(
        {.slot = *job->session()->slot, .tokens = job->PeekPrefill(n), .sample = last});
    prefill_jobs_.push_back(job);
    sampled += last ? 1 : 0;
    tokens += n;
    m_.prefill_chunk.Observe(n);
  }
  m_.prefill_step.Observe(static_cast<double>(tokens));
  DecodeStep& out = prefill_sample_;
  if (absl::Status status = backend_->PrefillBatch(prefill_items_, out.Output(sampled));
      !status.ok()) {
    // The call may have fed some of its slots: none of them can be trusted.
    for (const PrefillChunk& chunk : chunks) FailOnBackendError(chunk.id, status);
    return;
  }
  const absl::Time now = absl::Now();
  finished_.clear();
  size_t row = 0;
  for (size_t i = 0; i < prefill_items_.size(); ++i) {
    Job* job = prefill_jobs_[i];
    job->PrefillDone(static_cast<int32_t>(prefill_items_[i].tokens.size()));
    const int64_t position = static_cast<int64_t>(job->feed().size()) - job->prefill_remaining();
    if (IsCheckpoint(*job, position)) Checkpoint(*job, prefill_items_[i].slot, position);
    if (!prefill_items_[i].sample) continue;
    job->set_last_token_step(step_);
    job->Sampled(out.tokens[row]);
    const std::optional<FinishReason> finish =
        EmitSampled(*job, out.tokens[row], out.logprobs[row],
                    absl::MakeConstSpan(out.top_logprobs).subspan(row * kMaxTopLogprobs), now);
    ++row;
    m_.time_to_first_token.Observe(absl::ToDoubleSeconds(job->usage().time_to_first_token));
    if (finish.has_value()) finished_.emplace_back(job->id(), *finish);
  }
  for (const auto& [id, reason] : finished_) Complete(Extract(id), absl::OkStatus(), reason);
}

absl::Status Engine::ReusePrefix(Job& job) {
  if (!prefix_.enabled() || !job.knows_history()) return absl::OkStatus();
  const PrefixLookup found = prefix_.Lookup(job.request().owner, job.feed());
  if (found.state == nullptr) {
    switch (*found.miss) {
      case PrefixMiss::kNoPrefix:
        m_.prefix_miss_no_prefix.Increment();
        break;
      case PrefixMiss::kEvicted:
        m_.prefix_miss_evicted.Increment();
        break;
      case PrefixMiss::kTooShort:
        m_.prefix_miss_too_short.Increment();
        break;
    }
    return absl::OkStatus();
  }
  const SlotId slot = *job.session()->slot;
  if (absl::Status s = backend_->WriteSlot(slot, *found.state); !s.ok()) return s;
  // Writing a slot clears its sampling state: the job's parameters and its prompt's counts
  // again, exactly as AdmitWaiting set them on the empty slot.
  const GenerateRequest& request = job.request();
  if (absl::Status s = backend_->StartSampling(slot, request.sampling, request.top_logprobs,
                                               job.new_prompt_tokens());
      !s.ok()) {
    return s;
  }
  job.SkipPrefill(found.length);
  m_.prefix_hits.Increment();
  m_.prefix_tokens_saved.Increment(static_cast<double>(found.length));
  return absl::OkStatus();
}

bool Engine::IsCheckpoint(const Job& job, int64_t position) const {
  if (!prefix_.enabled() || !job.knows_history() || position < prefix_.options().min_tokens) {
    return false;
  }
  const int64_t every = prefix_.options().checkpoint_interval;
  return position == static_cast<int64_t>(job.feed().size()) - 1 ||
         (every > 0 && position % every == 0 &&
          position < static_cast<int64_t>(job.feed().size()));
}

int64_t Engine::NextCheckpoint(const Job& job) const {
  const int64_t remaining = job.prefill_remaining();
  if (!prefix_.enabled() || !job.knows_history()) return remaining;
  const int64_t end = static_cast<int64_t>(job.feed().size());
  const int64_t start = end - remaining;
  // Only positions a checkpoint is stored at (IsCheckpoint) end a chunk early.
  const int64_t first = std::max<int64_t>(start + 1, prefix_.options().min_tokens);
  int64_t stop = end;
  if (end - 1 >= first) stop = end - 1;
  if (const int64_t every = prefix_.options().checkpoint_interval; every > 0) {
    stop = std::min(stop, (first + every - 1) / every * every);
  }
  return std::max<int64_t>(stop - start, 1);
}

bool Engine::WaitsForPrefix(const Job& job) {
  const int64_t size = static_cast<int64_t>(job.feed().size());
  if (!prefix_.enabled() || !job.knows_history() || job.prefill_remaining() != size ||
      size == 0) {
    return false;
  }
  for (const Job* leader : prefill_leaders_) {
    if (leader->request().owner != job.request().owner) continue;
    const absl::Span<const TokenId> mine = job.feed();
    const absl::Span<const TokenId> theirs = leader->feed();
    const size_t common = static_cast<size_t>(
        std::mismatch(mine.begin(), mine.begin() + std::min(mine.size(), theirs.size()),
                      theirs.begin())
            .first -
        mine.begin());
    // A checkpoint this job can start from leaves it at least its last token to feed.
    const int64_t wanted = LastCheckpointAtOrBefore(
        *leader, std::min<int64_t>(static_cast<int64_t>(common), size - 1));
    const int64_t fed = static_cast<int64_t>(theirs.size()) - leader->prefill_remaining();
    if (wanted >= prefix_.options().min_tokens && fed < wanted) return true;
  }
  prefill_leaders_.push_back(&job);
  return false;
}

int64_t Engine::LastCheckpointAtOrBefore(const Job& leader, int64_t limit) const {
  const int64_t last = static_cast<int64_t>(leader.feed().size()) - 1;
  if (limit >= last) return last;
  const int64_t every = prefix_.options().checkpoint_interval;
  return every > 0 ? limit / every * every : 0;
}

void Engine::Checkpoint(Job& job, SlotId slot, int64_t position) {
  if (position < prefix_.options().min_tokens) return;
  const std::vector<TokenId> tokens = job.History(position);
  if (prefix_.Touch(job.request().owner, tokens)) return;
  StateBlob state;
  if (absl::Status s = backend_->ReadSlot(slot, state); !s.ok()) {
    spdlog::error("request {}: reading a prefix checkpoint failed: {}", job.request().request_id,
                  s.ToString());
    return;
  }
  if (prefix_.Insert(job.request().owner, tokens, std::move(state))) {
    m_.prefix_checkpoints.Increment();
  }
}

void Engine::ExpireSessions(absl::Time now) {
  if (now - last_expiry_ < kExpiryInterval) return;
  last_expiry_ = now;
  const std::vector<SessionId> expired = store_.ExpireIdle(now);
  for (const SessionId& id : expired) {
    boundaries_.Erase(id);
    spdlog::info("session {}: expired after {} idle", id.value,
                 absl::FormatDuration(options_.sessions.idle_timeout));
  }
  m_.expired_sessions.Increment(static_cast<double>(expired.size()));
}

void Engine::PublishStats() {
  EngineStats stats;
  stats.slot_capacity = slot_capacity_;
  stats.free_slots = backend_->free_slots();
  stats.active_requests = static_cast<int32_t>(active_.size());
  stats.resident_sessions = store_.resident_named_sessions();
  stats.hibernated_sessions = store_.hibernated_sessions();
  stats.ephemeral_sessions = store_.ephemeral_sessions();
  {
    absl::MutexLock lock(&mu_);
    stats.queued_requests = queued_requests_;
    stats.queue_depth = queued_requests_ + queued_ops_;
    stats_ = stats;
  }
  m_.queue_depth.Set(stats.queue_depth);
  m_.active_requests.Set(stats.active_requests);
  m_.free_slots.Set(stats.free_slots);
  m_.slot_capacity.Set(stats.slot_capacity);
  m_.resident_sessions.Set(stats.resident_sessions);
  m_.hibernated_sessions.Set(stats.hibernated_sessions);
  m_.ephemeral_sessions.Set(stats.ephemeral_sessions);
  m_.hibernations.Increment(static_cast<double>(store_.hibernations() - hibernations_reported_));
  hibernations_reported_ = store_.hibernations();
  m_.prefix_bytes.Set(static_cast<double>(prefix_.bytes()));
  m_.prefix_entries.Set(static_cast<double>(prefix_.size()));
  m_.session_checkpoint_bytes.Set(static_cast<double>(boundaries_.bytes()));
  m_.evictions_to_disk.Increment(
      static_cast<double>(store_.evictions_to_disk() - evictions_to_disk_reported_));
  evictions_to_disk_reported_ = store_.evictions_to_disk();
  m_.loads_from_disk.Increment(
      static_cast<double>(store_.loads_from_disk() - loads_from_disk_reported_));
  loads_from_disk_reported_ = store_.loads_from_disk();
  m_.session_host_bytes.Set(static_cast<double>(store_.host_bytes()));
  m_.disk_sessions.Set(store_.disk_sessions());
  if (prefix_disk_ != nullptr) {
    m_.prefix_disk_bytes.Set(static_cast<double>(prefix_disk_->bytes()));
    m_.prefix_disk_states.Set(static_cast<double>(prefix_disk_->size()));
    m_.prefix_disk_reads.Increment(
        static_cast<double>(prefix_disk_->reads() - prefix_disk_reads_reported_));
    prefix_disk_reads_reported_ = prefix_disk_->reads();
  }
  m_.prefix_evictions.Increment(
      static_cast<double>(prefix_.evictions() - prefix_evictions_reported_));
  prefix_evictions_reported_ = prefix_.evictions();
  m_.tenant_max_sessions_rejections.Increment(
      static_cast<double>(store_.tenant_quota_rejections() - tenant_session_rejections_reported_));
  tenant_session_rejections_reported_ = store_.tenant_quota_rejections();
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool Engine::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

int64_t Engine::max_snapshot_bytes() const {
  return MaxSnapshotBytes(model_.config, model_.fingerprint, options_.requests.max_prompt_tokens);
}

// ---- Sessions ------------------------------------------------------------------------------

template <typename Done>
Done Engine::SettleFirst(Done done) {
  return [this, done = std::move(done)](auto result) mutable {
    // Replied on the engine thread (not through WhenDurable, which settles itself): the
    // operation's session locks go back before the client hears of it.
    if (current_engine == this) store_.SettleLocks();
    std::move(done)(std::move(result));
  };
}

template <typename T>
void Engine::Reply(std::vector<SessionId> changed, Callback<T> done, T value) {
  store_.WhenDurable(std::move(changed), [done = std::move(done), value = std::move(value)](
                                             absl::Status written) mutable {
    if (!written.ok()) return std::move(done)(std::move(written));
    std::move(done)(std::move(value));
  });
}

SessionInfo Engine::InfoOf(const Session& session) const {
  SessionInfo info = SessionStore::InfoOf(session);
  info.boundaries = boundaries_.Boundaries(session.id);
  return info;
}
absl::StatusOr<Session*> Engine::FindIdle(const SessionId& id, absl::string_view owner) {
  absl::StatusOr<Session*> session = store_.Find(id, owner);
  if (!session.ok()) return session;
  if ((*session)->busy) {
    return absl::AbortedError(absl::StrCat("session ", id.value, " is busy with request ",
                                           (*session)->busy_request_id,
                                           "; retry when it has finished"));
  }
  return session;
}

void Engine::CreateSession(std::string owner, Callback<SessionInfo> done,
                           std::optional<SessionId> id) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, done = std::move(done), id = std::move(id)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = store_.Create(absl::Now(), owner, std::move(id));
        if (!session.ok()) return std::move(done)(session.status());
        spdlog::info("session {}: created for {}", (*session)->id.value, TenantForLog(owner));
        Reply({(*session)->id}, std::move(done), InfoOf(**session));
      },
      owner);
}

void Engine::GetSession(std::string owner, SessionId id, Callback<SessionInfo> done) {
  PostOp(
      [this, owner, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<SessionInfo> info = store_.Info(id, owner);
        if (info.ok()) info->boundaries = boundaries_.Boundaries(id);
        std::move(done)(std::move(info));
      },
      owner);
}

void Engine::ListSessions(std::string owner, std::optional<SessionId> after, int32_t limit,
                          Callback<SessionPage> done) {
  PostOp(
      [this, owner, after = std::move(after), limit,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        SessionPage page;
        page.sessions = store_.List(after, limit, owner);
        for (SessionInfo& info : page.sessions) info.boundaries = boundaries_.Boundaries(info.id);
        if (!page.sessions.empty() && store_.HasAfter(page.sessions.back().id, owner)) {
          page.next_after = page.sessions.back().id;
        }
        std::move(done)(std::move(page));
      },
      owner);
}

void Engine::ForkSession(std::string owner, SessionId id, Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        // The source is the forker's, so the fork (which keeps the source's owner) is too.
        absl::StatusOr<Session*> source = FindIdle(id, owner);
        if (!source.ok()) return std::move(done)(source.status());
        absl::StatusOr<Session*> fork = store_.Fork(**source, absl::Now());
        if (!fork.ok()) return std::move(done)(fork.status());
        spdlog::info("session {}: forked from {} for {}", (*fork)->id.value, id.value,
                     TenantForLog(owner));
        Reply({(*fork)->id}, std::move(done), InfoOf(**fork));
      },
      owner);
}

absl::StatusOr<SessionSnapshot> Engine::SessionAt(const Session& session,
                                                  int64_t num_tokens) const {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens must be >= 0, got ", num_tokens));
  }
  if (num_tokens == session.history.num_tokens()) return store_.Snapshot(session);
  return boundaries_.At(session.id, num_tokens, model_.config.StateFloatsPerSlot());
}

void Engine::EraseSession(Session* session) {
  boundaries_.Erase(session->id);
  store_.Erase(session);
}

void Engine::ForkSessionAt(std::string owner, SessionId id, int64_t num_tokens,
                           Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, id = std::move(id), num_tokens,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> source = FindIdle(id, owner);
        if (!source.ok()) return std::move(done)(source.status());
        absl::StatusOr<SessionSnapshot> at = SessionAt(**source, num_tokens);
        if (!at.ok()) return std::move(done)(at.status());
        const absl::Time now = absl::Now();
        at->create_time = absl::FromUnixMicros(absl::ToUnixMicros(now));
        absl::StatusOr<Session*> fork = store_.Insert(*std::move(at), now, owner);
        if (!fork.ok()) return std::move(done)(fork.status());
        spdlog::info("session {}: forked from {} at {} tokens for {}", (*fork)->id.value, id.value,
                     num_tokens, TenantForLog(owner));
        Reply({(*fork)->id}, std::move(done), InfoOf(**fork));
      },
      owner);
}

void Engine::RewindSession(std::string owner, SessionId id, int64_t num_tokens,
                           Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, id = std::move(id), num_tokens,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> found = FindIdle(id, owner);
        if (!found.ok()) return std::move(done)(found.status());
        Session& session = **found;
        if (num_tokens == session.history.num_tokens()) {
          return Reply({id}, std::move(done), InfoOf(session));
        }
        absl::StatusOr<SessionSnapshot> at = SessionAt(session, num_tokens);
        if (!at.ok()) return std::move(done)(at.status());
        session.history = SessionHistory(at->num_tokens, std::move(at->pending), at->token_counts);
        if (session.slot.has_value()) {
          absl::Status status = backend_->WriteSlot(*session.slot, at->state);
          if (status.ok()) {
            status = backend_->SetSeenCounts(*session.slot, session.history.SeenCounts());
          }
          if (!status.ok()) {
            spdlog::error("session {}: rewind failed in the backend: {}", id.value,
                          status.ToString());
            EraseSession(&session);
            return std::move(done)(absl::InternalError(
                absl::StrCat("the model backend failed: ", status.message(),
                             "; the session's state is unknown and the session was deleted")));
          }
        } else {
          session.hibernated = std::move(at->state);
        }
        boundaries_.DropAfter(id, num_tokens);
        store_.Touch(session, absl::Now());
        spdlog::info("session {}: rewound to {} tokens by {}", id.value, num_tokens,
                     TenantForLog(owner));
        Reply({id}, std::move(done), InfoOf(session));
      },
      owner);
}

void Engine::DeleteSession(std::string owner, SessionId id, StatusCallback done) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = FindIdle(id, owner);
        if (!session.ok()) return std::move(done)(session.status());
        EraseSession(*session);
        spdlog::info("session {}: deleted by {}", id.value, TenantForLog(owner));
        store_.WhenDurable({id}, std::move(done));
      },
      owner);
}

void Engine::ExportSession(std::string owner, SessionId id, Callback<std::string> done) {
  done = SettleFirst(std::move(done));
  PostOp(
      [this, owner, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = FindIdle(id, owner);
        if (!session.ok()) return std::move(done)(session.status());
        absl::StatusOr<SessionSnapshot> snapshot = store_.Snapshot(**session);
        if (!snapshot.ok()) return std::move(done)(snapshot.status());
        // The touch is not the export's change: a failed write of it does not fail the export.
        store_.Touch(**session, absl::Now());
        Reply({}, std::move(done), EncodeSnapshot(*snapshot, model_.fingerprint));
      },
      owner);
}

void Engine::ImportSession(std::string owner, absl::string_view bytes, Callback<SessionInfo> done,
                           std::optional<SessionId> id) {
  done = SettleFirst(std::move(done));
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(bytes, model_.config, model_.fingerprint,
                     options_.requests.max_prompt_tokens);
  if (!snapshot.ok()) return std::move(done)(snapshot.status());
  PostOp(
      [this, owner, snapshot = *std::move(snapshot), done = std::move(done),
       id = std::move(id)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session =
            store_.Insert(std::move(snapshot), absl::Now(), owner, std::move(id));
        if (!session.ok()) return std::move(done)(session.status());
        spdlog::info("session {}: imported ({} tokens) for {}", (*session)->id.value,
                     (*session)->history.num_tokens(), TenantForLog(owner));
        Reply({(*session)->id}, std::move(done), InfoOf(**session));
      },
      owner);
}

// ---- Shutdown and persistence --------------------------------------------------------------

absl::Status Engine::Shutdown(absl::Duration drain_deadline) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::OkStatus();
    draining_ = true;
    const absl::Time deadline = absl::Now() + drain_deadline;
    if (!mu_.AwaitWithDeadline(absl::Condition(this, &Engine::IdleLocked), deadline)) {
      spdlog::warn("engine: drain deadline passed with {} requests queued or running; "
                   "cancelling them",
                   queued_requests_ + active_requests_);
    }
  }
  PostAlways([this](absl::Status) {
    CancelAll();
    stop_requested_ = true;
  });
  // Without a thread, Create failed before the engine held any session: nothing to persist.
  const bool started = thread_.joinable();
  if (started) thread_.join();
  std::deque<Queued> leftover;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    leftover.swap(inbox_);
  }
  for (Queued& queued : leftover) {
    std::move(queued.op)(absl::UnavailableError("the server is shutting down"));
  }
  if (persister_ == nullptr || !started) return absl::OkStatus();
  absl::Status flushed = persister_->Flush();
  spdlog::info("state_dir {}: persisted {} sessions{}", options_.state_dir,
               store_.named_sessions(), flushed.ok() ? "" : " (some writes failed)");
  if (!flushed.ok()) {
    return absl::InternalError(absl::StrCat(
        "sessions could not all be written to state_dir ", options_.state_dir,
        "; first error: ", flushed.message()));
  }
  return absl::OkStatus();
}

}  // namespace linserve
