#include "server/engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr absl::Duration kExpiryInterval = absl::Seconds(1);
// How long an idle engine thread sleeps before checking for expired sessions.
constexpr absl::Duration kIdleWait = absl::Milliseconds(500);

size_t DecodeRows(const EngineOptions& options) {
  return static_cast<size_t>(std::max(options.scheduler.max_batch_size, 1));
}

}  // namespace

Engine::Engine(const Model& model, std::unique_ptr<Backend> backend,
               std::shared_ptr<ConstraintCache> constraints,
               std::unique_ptr<SessionPersister> persister,
               std::unique_ptr<PrefixDisk> prefix_disk, const EngineOptions& options,
               MetricsRegistry& metrics)
    : model_(model),
      options_(options),
      backend_(std::move(backend)),
      device_(backend_->device()),
      slot_capacity_(backend_->slot_capacity()),
      constraints_(std::move(constraints)),
      metrics_(metrics),
      phases_(metrics),
      emitter_(options.emitter_threads),
      inbox_(options.max_queue_depth, options.tenant_max_queued,
             metrics_.tenant_max_queued_rejections),
      persister_(std::move(persister)),
      store_(*backend_, options.sessions, persister_.get(), metrics_.session_store()),
      prefix_disk_(std::move(prefix_disk)),
      prefix_(options.prefix, model.fingerprint, /*extend=*/nullptr, prefix_disk_.get(),
              metrics_.prefix_store()),
      boundaries_(options.turn_boundaries),
      reads_(*backend_),
      planner_(prefix_, *backend_, reads_, metrics_),
      sessions_(inbox_, store_, boundaries_, reads_, *backend_, model, *constraints_,
                options.requests.max_prompt_tokens),
      decode_steps_{DecodeStep(DecodeRows(options), constraints_->vocabulary().mask_words()),
                    DecodeStep(DecodeRows(options), constraints_->vocabulary().mask_words())},
      launch_ahead_(backend_->asynchronous() && backend_->max_steps_in_flight() >= 2),
      prefill_sample_(DecodeRows(options), constraints_->vocabulary().mask_words()) {
  // A session another server replaced has another history: its turn boundaries are not its.
  // (Its boundaries still being read land first, and go with the rest.)
  store_.set_on_replaced([this](const SessionId& id) {
    reads_.Land(/*wait=*/true);
    boundaries_.Erase(id);
  });
  const size_t rows = DecodeRows(options);
  finished_.reserve(rows);
  plan_.decode.reserve(rows);
  plan_.prefill.reserve(rows);
  prefill_items_.reserve(rows);
  prefill_jobs_.reserve(rows);
  in_flight_.reserve(2);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model,
                                                       std::unique_ptr<Backend> backend,
                                                       const EngineOptions& options,
                                                       MetricsRegistry& metrics) {
  if (absl::Status s = ValidateEngineOptions(options); !s.ok()) return s;
  if (backend == nullptr) return absl::InvalidArgumentError("engine needs a backend");
  if (backend->config().vocab_size != model.config.vocab_size ||
      backend->config().StateFloatsPerSlot() != model.config.StateFloatsPerSlot()) {
    return absl::InvalidArgumentError("the backend runs a different model than the one given");
  }
  auto constraints = std::make_shared<ConstraintCache>(
      TokenVocabulary::Create(*model.tokenizer, model.config.eos_token_id),
      options.constraint_limits);
  std::unique_ptr<SessionPersister> persister;
  if (!options.state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<SessionPersister>> opened = SessionPersister::Open(
        {.dir = options.state_dir,
         .batch_interval = options.state_write_interval,
         .file_system = options.file_system,
         .write_errors = &metrics.GetCounter(
             "linserve_state_write_errors_total",
             "Session files that could not be written to or removed from state_dir (each "
             "failure counted; the requests whose change it was fail)"),
         .check_constraint =
             [constraints](const ConstraintState& state) {
               return CheckSnapshotConstraint(*constraints, state);
             }},
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
  std::unique_ptr<Engine> engine(new Engine(model, std::move(backend), std::move(constraints),
                                            std::move(persister), std::move(prefix_disk), options,
                                            metrics));
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

// ---- Requests ------------------------------------------------------------------------------

absl::StatusOr<JobId> Engine::Submit(GenerateRequest request, std::shared_ptr<TokenSink> sink) {
  std::vector<std::shared_ptr<TokenSink>> sinks;
  sinks.push_back(std::move(sink));
  absl::StatusOr<std::vector<JobId>> ids = Submit(std::move(request), std::move(sinks));
  if (!ids.ok()) return ids.status();
  return ids->front();
}

absl::StatusOr<std::vector<JobId>> Engine::Submit(GenerateRequest request,
                                                  std::vector<std::shared_ptr<TokenSink>> sinks) {
  if (absl::Status s = ValidateGenerateRequest(request, options_.requests, model_.config);
      !s.ok()) {
    return s;
  }
  if (request.constraint != nullptr &&
      &request.constraint->vocabulary() != &constraints_->vocabulary()) {
    return absl::InvalidArgumentError(
        "constraint: compiled for another vocabulary than this engine's model's (compile it "
        "with Engine::constraints())");
  }
  const int32_t n = request.n;
  if (sinks.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("n: ", n, " choices need as many sinks, got ", sinks.size()));
  }
  // The choices are admitted together: more than the engine can ever hold at once would wait
  // forever.
  for (const auto& [limit, name] :
       {std::pair<int32_t, const char*>{backend_->slot_capacity(), "state slots"},
        {options_.max_queue_depth, "max_queue_depth"},
        {options_.tenant_max_queued > 0 ? options_.tenant_max_queued : n, "tenant_max_queued"}}) {
    if (n > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("n: ", n, " choices exceed the server's ", limit, " ", name,
                       " (the choices of a request run at once)"));
    }
  }
  const JobId first{next_job_id_.fetch_add(n, std::memory_order_relaxed)};
  const std::string tenant = request.tenant;
  const int32_t leader = request.session_choice.value_or(0);
  const absl::Time now = absl::Now();
  std::vector<JobId> ids;
  std::vector<std::unique_ptr<Job>> followers;
  std::unique_ptr<Job> leader_job;
  for (int32_t i = 0; i < n; ++i) {
    GenerateRequest choice = request;
    choice.sampling.seed = request.sampling.seed + static_cast<uint64_t>(i);  // mod 2^64
    if (i != leader) choice.session_id.reset();
    const JobId id{first.value + i};
    ids.push_back(id);
    auto job = std::make_unique<Job>(id, std::move(choice), std::move(sinks[i]), model_, now, i);
    if (i == leader) {
      leader_job = std::move(job);
    } else {
      followers.push_back(std::move(job));
    }
  }
  leader_job->HoldFollowers(std::move(followers));
  absl::Status posted = inbox_.Post(
      [this, job = std::move(leader_job)](absl::Status admitted) mutable {
        if (admitted.ok()) Accept(std::move(job));
      },
      /*is_request=*/true, tenant, n);
  if (!posted.ok()) return posted;
  return ids;
}

void Engine::Cancel(JobId id) {
  inbox_.PostAlways([this, id](absl::Status admitted) {
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
    absl::StatusOr<Session*> session = store_.Find(*request.session_id, request.tenant);
    if (!session.ok()) {
      Complete(std::move(job), session.status(), FinishReason::kError);
      return;
    }
    if ((*session)->busy) {
      Complete(std::move(job),
               absl::AbortedError(absl::StrCat(
                   "session ", request.session_id->value, " is busy with request ",
                   (*session)->busy_request_id,
                   "; a session serves one request at a time")),
               FinishReason::kError);
      return;
    }
    (*session)->busy = true;
    (*session)->busy_request_id = request.request_id;
    job->Bind(*session);
  }
  waiting_.push_back(std::move(job));
}

bool Engine::AdmitFollowers(Job& leader, absl::Time now) {
  std::vector<std::unique_ptr<Job>> followers = leader.TakeFollowers();
  size_t bound = 0;
  for (; bound < followers.size(); ++bound) {
    absl::StatusOr<Session*> session = store_.CreateEphemeral(now);
    if (!session.ok()) break;
    followers[bound]->Bind(*session);
  }
  if (bound == followers.size()) {
    leader.HoldFollowers(std::move(followers));
    return true;
  }
  for (size_t i = 0; i < bound; ++i) {
    store_.Release(*followers[i]->session(), now);
    followers[i]->Bind(nullptr);
  }
  leader.HoldFollowers(std::move(followers));
  return false;
}

void Engine::AdmitWaiting() {
  if (waiting_.empty()) return;
  const absl::Time now = absl::Now();
  std::deque<std::unique_ptr<Job>> still_waiting;
  std::vector<std::pair<std::unique_ptr<Job>, absl::Status>> failed;
  // Once a request of several choices waits for slots, the ones behind it wait too, so that
  // slots freed meanwhile gather for it rather than go one by one to later requests; but not one
  // whose session is in a slot already (it needs none, and its busy session pins that slot
  // until it runs).
  bool group_waits = false;
  while (!waiting_.empty()) {
    std::unique_ptr<Job> job = std::move(waiting_.front());
    waiting_.pop_front();
    const bool needs_no_slot = job->session() != nullptr && job->session()->slot.has_value() &&
                               !job->holds_followers();
    if (group_waits && !needs_no_slot) {
      still_waiting.push_back(std::move(job));
      continue;
    }
    absl::Status status;
    const bool own_session = job->session() == nullptr;
    if (own_session) {
      absl::StatusOr<Session*> session = store_.CreateEphemeral(now);
      status = session.status();
      if (session.ok()) job->Bind(*session);
    } else {
      status = store_.MakeResident(*job->session(), now);
    }
    if (status.ok() && job->holds_followers() && !AdmitFollowers(*job, now)) {
      if (own_session) {
        store_.Release(*job->session(), now);
        job->Bind(nullptr);
      }
      status = absl::ResourceExhaustedError("no state slot for every choice");
    }
    if (absl::IsResourceExhausted(status) && store_.SlotWaitHelps()) {
      if (job->holds_followers()) group_waits = true;
      still_waiting.push_back(std::move(job));  // every slot is busy; retry next step
      continue;
    }
    if (status.ok()) status = job->Activate(options_.requests.max_prompt_tokens);
    // Counted as running from the moment it is active, so that Complete's count of its end
    // (inbox_.Ended(job->active())) matches even when StartSampling fails.
    if (job->active()) inbox_.Activated(job->request().tenant);
    if (status.ok()) {
      status = backend_->StartSampling(*job->session()->slot, job->request().sampling,
                                       job->request().top_logprobs, job->new_prompt_tokens());
    }
    if (!status.ok()) {
      failed.emplace_back(std::move(job), status);
      continue;
    }
    metrics_.prompt_tokens.Increment(job->usage().prompt_tokens);
    // The other choices start as the leader does and wait for its fork (their samplers start
    // then, from a copy of its slot).
    std::vector<std::unique_ptr<Job>> followers = job->TakeFollowers();
    std::vector<JobId> forks;
    for (std::unique_ptr<Job>& follower : followers) {
      follower->ActivateAsChoice(*job);
      inbox_.Activated(follower->request().tenant);
      forks.push_back(follower->id());
      jobs_[follower->id()] = follower.get();
    }
    job->AwaitForks(std::move(forks));
    active_.push_back(std::move(job));
    for (std::unique_ptr<Job>& follower : followers) active_.push_back(std::move(follower));
  }
  // Slots free up only as running requests end: with none running after this pass, a request
  // of several choices still waiting lacks slots that sessions of other waiting requests hold,
  // and could wait forever.
  for (std::unique_ptr<Job>& job : still_waiting) {
    if (active_.empty() && job->holds_followers()) {
      failed.emplace_back(std::move(job),
                          absl::ResourceExhaustedError(
                              "n: the choices need as many state slots at once, and sessions of "
                              "other waiting requests hold the free ones; retry later"));
    } else {
      waiting_.push_back(std::move(job));
    }
  }
  for (auto& [job, status] : failed) Complete(std::move(job), status, FinishReason::kError);
}

void Engine::ForkChoices(Job& leader) {
  const SlotId from = *leader.session()->slot;
  for (JobId id : leader.TakePendingForks()) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;  // cancelled meanwhile
    Job& follower = *it->second;
    const SlotId to = *follower.session()->slot;
    absl::Status status = backend_->CopySlot(from, to);
    if (status.ok()) {
      status = backend_->StartSampling(to, follower.request().sampling,
                                       follower.request().top_logprobs, {});
    }
    if (!status.ok()) {
      FailOnBackendError(id, status);
      continue;
    }
    follower.ForkedAt(leader.fed());
  }
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
  // Choices that never started (still held, or waiting for this leader's fork) end as it
  // does: it can end before its fork only failed or cancelled.
  for (std::unique_ptr<Job>& follower : job->TakeFollowers()) {
    Complete(std::move(follower), status, reason);
  }
  for (JobId id : job->TakePendingForks()) {
    if (std::unique_ptr<Job> follower = Extract(id); follower != nullptr) {
      Complete(std::move(follower), status, reason);
    }
  }
  const absl::Time now = absl::Now();
  inbox_.Ended(job->active(), job->request().tenant);
  Session* session = job->session();
  const std::string session_name =
      session == nullptr ? "-" : (session->ephemeral ? "ephemeral" : session->id.value);
  DropDecodeRows(*job);
  job->SettleSession();
  ExportTurnEnd(*job, session, status);
  jobs_.erase(job->id());
  const bool named = session != nullptr && !session->ephemeral;
  if (session != nullptr) store_.Release(*session, now);
  absl::AnyInvocable<void(absl::Status) &&> report = job->Report(status, reason, now);
  // Counted and published before the client hears of the end, so that what it sees next is
  // current.
  const Usage& usage = job->usage();
  metrics_.CountGeneration(status, reason);
  if (status.ok()) {
    spdlog::info(
        "request {} session {}: finished ({}) prompt_tokens={} generated_tokens={} "
        "ttft_ms={:.1f} total_ms={:.1f}",
        job->request().request_id, session_name, ToString(reason), usage.prompt_tokens,
        usage.generated_tokens, absl::ToDoubleMilliseconds(usage.time_to_first_token),
        absl::ToDoubleMilliseconds(usage.total_time));
  } else {
    spdlog::info("request {} session {}: ended with {} after {} tokens, total_ms={:.1f}",
                 job->request().request_id, session_name, status.ToString(),
                 usage.generated_tokens, absl::ToDoubleMilliseconds(usage.total_time));
  }
  PublishStats();
  // A client that heard its request end finds the session as it left it, even after a crash;
  // one whose session's change could not be written hears that instead.
  // The report goes through the job's emitter thread, after its tokens (staged until now).
  emitter_.Flush();
  const JobId id = job->id();
  auto post = [emitter = &emitter_, id, report = std::move(report)](absl::Status written) mutable {
    emitter->Post(id, [report = std::move(report), written = std::move(written)]() mutable {
      std::move(report)(std::move(written));
    });
  };
  if (named) {
    store_.WhenDurable({session->id}, std::move(post));
  } else {
    store_.SettleLocks();  // a lookup's lock goes back before the client hears of it
    post(absl::OkStatus());
  }
}

void Engine::ExportTurnEnd(Job& job, Session* session, const absl::Status& status) {
  if (session == nullptr || !session->slot.has_value() ||
      !(status.ok() || absl::IsCancelled(status))) {
    return;  // a backend failure leaves the state unknown
  }
  ScopedStepPhase phase(phases_, StepPhase::kExports);
  // A turn boundary: the state after everything the session consumed.
  if (job.knows_history()) {
    if (absl::StatusOr<int64_t> position = backend_->SlotPosition(*session->slot); position.ok()) {
      planner_.Checkpoint(job, *session->slot, *position);
    }
  }
  if (options_.turn_boundaries.per_session > 0 && !session->ephemeral) {
    // The session's continuation data now, its state when the read lands.
    reads_.Start(*session->slot, [this, tenant = session->tenant, id = session->id,
                                  position = session->history.position(),
                                  boundary = store_.SnapshotWithoutState(*session)](
                                     absl::StatusOr<StateBlob> state) mutable {
      if (!state.ok() || state->position != position) {
        spdlog::error("session {}: reading its turn boundary at position {} failed: {}", id.value,
                      position,
                      state.ok() ? absl::StrCat("the state is at position ", state->position)
                                 : state.status().ToString());
        return;
      }
      boundary.state = *std::move(state);
      boundaries_.Add(tenant, id, std::move(boundary));
    });
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
           FinishReason::kError);
  if (named) {
    reads_.Land(/*wait=*/true);  // its boundaries still being read go with the rest
    sessions_.Erase(session);
  }
}

void Engine::CancelAll() {
  std::vector<JobId> ids;
  for (const auto& job : waiting_) ids.push_back(job->id());
  for (const auto& job : active_) ids.push_back(job->id());
  for (JobId id : ids) {
    // A choice waiting for its leader's fork has ended with the leader already.
    if (std::unique_ptr<Job> job = Extract(id); job != nullptr) {
      Complete(std::move(job), absl::OkStatus(), FinishReason::kCancelled);
    }
  }
}

// ---- The loop (one step of it: engine_step.cc) ---------------------------------------------

void Engine::Run() {
  inbox_.BindEngineThread();
  while (true) {
    // At once after each: a client that heard back may go to another replica next.
    phases_.Enter(StepPhase::kInbox);
    inbox_.RunAll([this] { store_.SettleLocks(); });
    if (stop_requested_) break;
    phases_.Enter(StepPhase::kOther);
    ExpireSessions(absl::Now());
    phases_.Enter(StepPhase::kAdmit);
    AdmitWaiting();
    const bool step = !active_.empty() || !in_flight_.empty();
    if (step) Step();
    const bool idle = active_.empty() && in_flight_.empty();
    if (reads_.pending()) {
      // The reads done by now, the others at a later iteration; all of them before sleeping,
      // when there is nothing to overlap the device's copies with.
      phases_.Enter(StepPhase::kExports);
      reads_.Land(/*wait=*/idle);
    }
    phases_.Enter(StepPhase::kEmit);
    emitter_.Flush();  // the step's tokens go to their streams
    phases_.Enter(StepPhase::kOther);
    store_.SettleLocks();
    PublishStats();
    phases_.Flush(/*observe=*/step);
    if (idle) {
      inbox_.Wait(kIdleWait);
      phases_.Flush(/*observe=*/false);  // idle time is no phase's
    }
  }
  // Every job has ended (CancelAll); a step still in flight only has dropped rows.
  while (!in_flight_.empty()) CollectDecode();
  reads_.Land(/*wait=*/true);
  store_.SettleLocks();
  PublishStats();
}

void Engine::ExpireSessions(absl::Time now) {
  if (now - last_expiry_ < kExpiryInterval) return;
  last_expiry_ = now;
  const std::vector<SessionId> expired = store_.ExpireIdle(now);
  if (!expired.empty()) reads_.Land(/*wait=*/true);  // their boundaries go with the rest
  for (const SessionId& id : expired) {
    boundaries_.Erase(id);
    spdlog::info("session {}: expired after {} idle", id.value,
                 absl::FormatDuration(options_.sessions.idle_timeout));
  }
  metrics_.expired_sessions.Increment(static_cast<double>(expired.size()));
}

void Engine::PublishStats() {
  EngineStats stats;
  stats.slot_capacity = slot_capacity_;
  stats.free_slots = backend_->free_slots();
  stats.active_requests = static_cast<int32_t>(active_.size());
  stats.resident_sessions = store_.resident_named_sessions();
  stats.hibernated_sessions = store_.hibernated_sessions();
  stats.ephemeral_sessions = store_.ephemeral_sessions();
  const Inbox::Depth depth = inbox_.depth();
  stats.queued_requests = depth.queued_requests;
  stats.queue_depth = depth.queue_depth;
  {
    absl::MutexLock lock(&stats_mu_);
    stats_ = stats;
  }
  metrics_.Publish(stats, store_, prefix_, prefix_disk_.get(), boundaries_);
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

int64_t Engine::max_snapshot_bytes() const {
  return MaxSnapshotBytes(model_.config, model_.fingerprint, options_.requests.max_prompt_tokens);
}

// ---- Sessions (session_operations.h) -------------------------------------------------------

void Engine::CreateSession(std::string tenant, Callback<SessionInfo> done,
                           std::optional<SessionId> id) {
  sessions_.Create(std::move(tenant), std::move(done), std::move(id));
}

void Engine::GetSession(std::string tenant, SessionId id, Callback<SessionInfo> done) {
  sessions_.Get(std::move(tenant), std::move(id), std::move(done));
}

void Engine::ListSessions(std::string tenant, std::optional<SessionId> after, int32_t limit,
                          Callback<SessionPage> done) {
  sessions_.List(std::move(tenant), std::move(after), limit, std::move(done));
}

void Engine::ForkSession(std::string tenant, SessionId id, Callback<SessionInfo> done) {
  sessions_.Fork(std::move(tenant), std::move(id), std::move(done));
}

void Engine::ForkSessionAt(std::string tenant, SessionId id, int64_t num_tokens,
                           Callback<SessionInfo> done) {
  sessions_.ForkAt(std::move(tenant), std::move(id), num_tokens, std::move(done));
}

void Engine::RewindSession(std::string tenant, SessionId id, int64_t num_tokens,
                           Callback<SessionInfo> done) {
  sessions_.Rewind(std::move(tenant), std::move(id), num_tokens, std::move(done));
}

void Engine::DeleteSession(std::string tenant, SessionId id, StatusCallback done) {
  sessions_.Delete(std::move(tenant), std::move(id), std::move(done));
}

void Engine::ExportSession(std::string tenant, SessionId id, Callback<std::string> done) {
  sessions_.Export(std::move(tenant), std::move(id), std::move(done));
}

void Engine::ImportSession(std::string tenant, absl::string_view snapshot,
                           Callback<SessionInfo> done, std::optional<SessionId> id) {
  sessions_.Import(std::move(tenant), snapshot, std::move(done), std::move(id));
}

// ---- Shutdown and persistence --------------------------------------------------------------

absl::Status Engine::Shutdown(absl::Duration drain_deadline) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (!inbox_.Drain(absl::Now() + drain_deadline)) return absl::OkStatus();
  inbox_.PostAlways([this](absl::Status) {
    CancelAll();
    stop_requested_ = true;
  });
  // Without a thread, Create failed before the engine held any session: nothing to persist.
  const bool started = thread_.joinable();
  if (started) thread_.join();
  inbox_.Close();
  if (persister_ == nullptr || !started) {
    emitter_.Drain();
    return absl::OkStatus();
  }
  absl::Status flushed = persister_->Flush();
  emitter_.Drain();  // the reports Flush made durable have reached their sinks
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
