// Engine: owns the Backend and the SessionStore and runs every generation on one thread.
//
// Other threads reach the engine only through a bounded inbox: Submit and the session
// operations enqueue work and return at once (RESOURCE_EXHAUSTED naming max_queue_depth when it
// is full), so a transport thread never waits for a model step. The engine thread loops: run the
// inbox (submissions, cancellations, session operations), admit waiting requests to state
// slots, ask the Scheduler for a plan, run one batched decode (the backend samples) and one
// batched prefill of the plan's prompt chunks (Backend::PrefillBatch), hand tokens to each
// request's TokenSink.
//
// On an asynchronous backend (a GPU) the loop is pipelined: a step collects the decode the
// previous step launched, launches the next one at once with those tokens as inputs, and only
// then does the host's share (stop matching, detokenizing, the transport, the inbox, admission,
// the next plan) while the device computes. A request that ends on a token (EOS, a stop) has by
// then had that token fed to the step in flight: the step's pick for it is dropped, and the
// session keeps the fed token as consumed rather than pending, which continues identically.
//
// What a session holds after a request: every token of its prompt and every token handed to
// the sink, even when the request was cancelled or failed part-way. Tokens the model has not
// consumed yet (the last one sent; the rest of a prompt cut short by a cancellation) are kept
// as pending and fed first by the session's next request, so the session's state always
// corresponds exactly to the tokens its client was sent.
#ifndef LINSERVE_SERVER_ENGINE_ENGINE_H_
#define LINSERVE_SERVER_ENGINE_ENGINE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "server/engine/job.h"
#include "server/engine/job_id.h"
#include "server/metrics/metrics.h"
#include "server/prefix/prefix_store.h"
#include "server/engine/request.h"
#include "server/engine/scheduler.h"
#include "server/sessions/session_checkpoints.h"
#include "server/sessions/session_id.h"
#include "server/storage/file_system.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/session_store.h"
#include "server/engine/token_sink.h"

namespace linserve {

struct EngineOptions {
  // Decode batch cap and the per-step prefill budgets. Default: see SchedulerLimits (the CPU's
  // values; SchedulerDefaults has each device's).
  SchedulerLimits scheduler;
  // Session count and idle expiry. Default: see SessionStoreOptions.
  SessionStoreOptions sessions;
  // Per-request limits. Default: see RequestLimits.
  RequestLimits requests;
  // Prefix reuse: budget, checkpoint interval. Default: see PrefixStoreOptions.
  PrefixStoreOptions prefix;
  // Turn boundaries kept for RewindSession and ForkSessionAt. Default: see
  // SessionCheckpointOptions.
  SessionCheckpointOptions session_checkpoints;
  // Work waiting for the engine thread: submitted requests not yet running (including those
  // waiting for a free state slot) plus session operations not yet run. Beyond it Submit and
  // the session operations fail at once with RESOURCE_EXHAUSTED. Default: 256.
  int32_t max_queue_depth = 256;
  // The share of max_queue_depth one owner (tenant) may fill: its requests not yet running plus
  // its session operations not yet run. Beyond it that owner's Submit and session operations
  // fail at once with RESOURCE_EXHAUSTED naming tenant_max_queued; other owners' are not
  // affected. 0: no quota of its own (max_queue_depth alone applies). In [0, max_queue_depth].
  // Default: 0.
  int32_t tenant_max_queued = 0;
  // Where sessions persist (session_persister.h): every change of a named session is written
  // behind, and its client hears that a request, create, fork, import, export or delete is
  // done only once the change is on disk; Create restores them. "" keeps sessions in memory
  // only. Default: "".
  std::string state_dir;
  // Least time between two batches of session writes. Default: 2 ms.
  absl::Duration state_write_interval = absl::Milliseconds(2);
  // The file system under state_dir; nullptr means DefaultFileSystem(). Must outlive the
  // engine. Default: nullptr.
  FileSystem* file_system = nullptr;
};

// Fills each tenant quota left at 0 in `options` (sessions.tenant_max_sessions,
// tenant_max_queued, prefix.tenant_budget_bytes, session_checkpoints.tenant_budget_bytes) with
// a fair share of its global limit among `tenants` known tenants: the limit divided by
// `tenants`, rounded down, at least 1 (0 for a limit of 0), so that the shares add up to at most
// the limit and no tenant can take another's share. With at most one tenant they stay 0: the
// global limits alone, as without tenants.
void ApplyFairTenantShares(int32_t tenants, EngineOptions& options);

struct SessionPage {
  std::vector<SessionInfo> sessions;
  // Pass as `after` to get the next page; nullopt on the last page.
  std::optional<SessionId> next_after;
};

// Published by the engine thread after every loop iteration.
struct EngineStats {
  int32_t slot_capacity = 0;
  int32_t free_slots = 0;
  int32_t active_requests = 0;
  // Submitted requests not yet running plus session operations not yet run.
  int32_t queue_depth = 0;
  int32_t queued_requests = 0;
  int32_t resident_sessions = 0;
  int32_t hibernated_sessions = 0;
  int32_t ephemeral_sessions = 0;
};

class Engine {
 public:
  // Completion callbacks run on the engine thread, on the persister's thread once a change is
  // durable (with a state_dir), or on the calling thread when the operation is rejected at
  // once (queue full, shutting down). They must not block.
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>) &&>;
  using StatusCallback = absl::AnyInvocable<void(absl::Status) &&>;

  // `model` must outlive the engine; `backend` must run that model. Restores the sessions
  // persisted in options.state_dir with every field as persisted (files that fail to decode
  // are logged and left in place; sessions idle past the timeout are expired and their files
  // removed) and starts the engine thread. Errors name the option or directory at fault
  // (FAILED_PRECONDITION for a state_dir that cannot be created or written).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Model& model,
                                                        std::unique_ptr<Backend> backend,
                                                        const EngineOptions& options,
                                                        MetricsRegistry& metrics);
  // Shuts down without a drain period if Shutdown was not called.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates `request` (INVALID_ARGUMENT naming the field and limit) and queues
  // it; RESOURCE_EXHAUSTED when the queue is full or request.owner has tenant_max_queued
  // waiting, UNAVAILABLE once shutting down. On success
  // the sink will hear OnFinish exactly once (NOT_FOUND for an unknown session, ABORTED when
  // the session is busy, ...).
  absl::StatusOr<JobId> Submit(GenerateRequest request, std::shared_ptr<TokenSink> sink);
  // Thread-safe. Ends the job within one engine step: its sink hears OnFinish(CANCELLED).
  // Unknown or finished jobs are ignored.
  void Cancel(JobId job);

  // Session operations, thread-safe; errors: NOT_FOUND, ABORTED (a request is running on the
  // session), RESOURCE_EXHAUSTED (max_sessions, tenant_max_sessions, queue full,
  // tenant_max_queued), UNAVAILABLE (shutting down).
  //
  // Each acts on behalf of `owner`, the tenant the transport authenticated ("" without
  // authentication): a session of another owner answers NOT_FOUND with the very message of an
  // unknown id (existence is not revealed), lists hold only the owner's sessions, and created,
  // forked and imported sessions belong to `owner`.
  // `id`: the client's proposed id (validated by the caller); ALREADY_EXISTS when taken, here
  // or in state_dir. nullopt: a fresh random id.
  void CreateSession(std::string owner, Callback<SessionInfo> done,
                     std::optional<SessionId> id = std::nullopt);
  void GetSession(std::string owner, SessionId id, Callback<SessionInfo> done);
  // `limit` >= 1.
  void ListSessions(std::string owner, std::optional<SessionId> after, int32_t limit,
                    Callback<SessionPage> done);
  void ForkSession(std::string owner, SessionId id, Callback<SessionInfo> done);
  // A fork of the session as it stood at `num_tokens`, one of its kept turn boundaries
  // (SessionInfo::boundaries) or its current length. INVALID_ARGUMENT naming num_tokens and
  // the kept boundaries otherwise.
  void ForkSessionAt(std::string owner, SessionId id, int64_t num_tokens,
                     Callback<SessionInfo> done);
  // Returns the session exactly to `num_tokens`, one of its kept turn boundaries or its
  // current length: state, pending tokens and penalty counts as they were then, so it
  // continues as it would have. Later boundaries are dropped. Errors as ForkSessionAt's.
  void RewindSession(std::string owner, SessionId id, int64_t num_tokens,
                     Callback<SessionInfo> done);
  void DeleteSession(std::string owner, SessionId id, StatusCallback done);
  // The session's snapshot (snapshot.h), which names no owner.
  void ExportSession(std::string owner, SessionId id, Callback<std::string> done);
  // Decodes on the calling thread (rejecting corrupt or foreign snapshots before anything
  // changes), then adds the session under `id` (as CreateSession's) or a new one, owned by
  // `owner`.
  void ImportSession(std::string owner, absl::string_view snapshot, Callback<SessionInfo> done,
                     std::optional<SessionId> id = std::nullopt);

  // Thread-safe.
  EngineStats stats() const;
  bool draining() const;
  // False while a write to state_dir is failing (/readyz reports not ready meanwhile).
  bool writes_healthy() const { return store_.writes_healthy(); }
  const Model& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  DeviceKind device() const { return device_; }
  int32_t slot_capacity() const { return slot_capacity_; }
  // The largest snapshot ImportSession accepts.
  int64_t max_snapshot_bytes() const;

  // Stops admission (UNAVAILABLE from then on), lets queued and running requests finish for up
  // to `drain_deadline`, cancels what remains (finish reason kCancelled), stops the engine
  // thread and waits until every session change is written to options.state_dir. Returns the
  // persistence outcome.
  // Thread-safe; later calls return at once with OK.
  absl::Status Shutdown(absl::Duration drain_deadline);

 private:
  Engine(const Model& model, std::unique_ptr<Backend> backend,
         std::unique_ptr<SessionPersister> persister, std::unique_ptr<PrefixDisk> prefix_disk,
         const EngineOptions& options, MetricsRegistry& metrics);

  // An inbox entry: called with OK on the engine thread, or with the reason it was not run
  // (queue full, shutting down) on whichever thread found that out.
  using Op = absl::AnyInvocable<void(absl::Status) &&>;

  // Queues `op` of `owner` unless the queue is full, the owner has tenant_max_queued waiting or
  // the engine is draining; then calls it with that error at once and returns the error.
  absl::Status Post(Op op, bool is_request, const std::string& owner);
  // Post for session operations, whose ops report a rejection themselves.
  void PostOp(Op op, const std::string& owner) {
    Post(std::move(op), /*is_request=*/false, owner).IgnoreError();
  }
  // One of the owner's queued requests or operations has left the queue.
  void UnqueueLocked(const std::string& owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `op` whatever the queue depth (cancellations and shutdown steps).
  void PostAlways(Op op);
  bool HasInboxLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Run();
  // Runs every queued operation; false once the thread must stop.
  bool RunInbox();
  void Accept(std::unique_ptr<Job> job);
  void AdmitWaiting();
  // One decode step's rows and where the backend writes their samples. Sized once for
  // max_batch_size rows: no allocation in a step.
  struct DecodeStep {
    explicit DecodeStep(size_t rows);
    // The first `rows` rows of the sample buffers.
    SampleOutput Output(size_t rows);
    int64_t step = 0;  // the engine step that launched it
    std::vector<DecodeItem> items;
    // The job of each row; nullptr once the job has ended (its row is then dropped).
    std::vector<Job*> jobs;
    std::vector<TokenId> tokens;
    std::vector<float> logprobs;
    std::vector<TokenLogprob> top_logprobs;
  };

  // One engine step. On an asynchronous backend the loop is pipelined: the step collects the
  // decode launched by the previous one (its tokens become the next inputs), launches the next
  // decode and only then hands the collected tokens to their sinks, so the host's work (stop
  // matching, detokenizing, the transport, admission, planning) overlaps the device's.
  void Step();
  // Launches a decode of `batch` into the free step buffer (in_flight_ on success).
  void LaunchDecode(absl::Span<const JobId> batch);
  // Waits for the step in flight; its live rows' jobs get their tokens (Job::Sampled). Returns
  // the step, or nullptr when the backend failed (its jobs have then failed).
  DecodeStep* CollectDecode();
  // Hands each live row of a collected step to its job's sink and ends the jobs that are done.
  void EmitDecoded(DecodeStep& step);
  // Feeds the step's prompt chunks in one Backend::PrefillBatch call; the prompts that end in
  // it get their first token.
  void RunPrefill(absl::Span<const PrefillChunk> chunks);
  // Before a job's first prefill chunk: when its session was empty, starts it from the longest
  // cached prefix of its tokens (copied into the job's own slot; prefill starts after it).
  // Errors are the backend's.
  absl::Status ReusePrefix(Job& job);
  // Prefix checkpoints inside a prompt: every checkpoint_interval-th position and the prompt's
  // last token but one (a resent prompt must feed at least its last token for the first
  // logits), for jobs that know their history. A prefill chunk ends at the next one (the rest
  // goes in the next step) and the state is stored after the batch.
  bool IsCheckpoint(const Job& job, int64_t position) const;
  // Tokens the job may feed before its next checkpoint (at least 1).
  int64_t NextCheckpoint(const Job& job) const;
  // Prompts that share a prefix arrive together (a system prompt, a resent conversation): the
  // first one feeds it and the others wait for its checkpoint rather than feeding it too. A job
  // that has fed nothing waits while a prefill leader (a job of the same owner feeding its
  // prompt, collected in prefill_leaders_ in admission order) will store a checkpoint of at
  // least min_tokens inside the prefix they share and has not reached it yet; a job that does
  // not wait becomes a leader. A waiting job is not offered to the scheduler, so the step's
  // budget goes to the others. Nothing waits on a waiting job, and a leader only moves on (or
  // ends, cancelled or failed, and stops being one), so every job is offered again.
  bool WaitsForPrefix(const Job& job);
  // The last position at most `limit` at which `leader` stores a checkpoint (IsCheckpoint), or
  // a position below min_tokens when there is none.
  int64_t LastCheckpointAtOrBefore(const Job& leader, int64_t limit) const;
  // Stores the state of the job's slot, which has consumed its first `position` tokens, unless
  // the store holds that checkpoint already.
  void Checkpoint(Job& job, SlotId slot, int64_t position);
  // Hands `token` (row `row` of `logprobs` and `top_logprobs`) to `job` (Job::Emit) and counts
  // it.
  std::optional<FinishReason> EmitSampled(Job& job, TokenId token, float logprob,
                                          absl::Span<const TokenLogprob> top_logprobs,
                                          absl::Time now);
  // Drops `job`'s rows from the step buffers. A row in a step still in flight picks a token
  // that no one will see; the slot's seen counts then include it, so a named session that keeps
  // the slot gets its counts back from the session.
  void DropDecodeRows(Job& job);
  // Takes a job out of the waiting or active list; nullptr if it is in neither.
  std::unique_ptr<Job> Extract(JobId id);
  // Ends a job and releases its session.
  void Complete(std::unique_ptr<Job> job, const absl::Status& status, FinishReason reason);
  // A backend failure leaves the job's session in an unknown state: fail the job and, for a
  // named session, delete the session.
  void FailOnBackendError(JobId id, const absl::Status& status);
  void CancelAll();
  void ExpireSessions(absl::Time now);
  void PublishStats();
  // What the store shows of the session, with its kept boundaries.
  SessionInfo InfoOf(const Session& session) const;
  // `done` that first gives back the session locks the operation took when it is called on the
  // engine thread (a reply that does not wait for a write).
  template <typename Done>
  Done SettleFirst(Done done);
  // Calls `done` with `value` once the session changes made so far are written, or with the
  // write's error when the latest change of one of the `changed` sessions could not be.
  template <typename T>
  void Reply(std::vector<SessionId> changed, Callback<T> done, T value);
  // Engine thread (or after it stopped): the session named `id` of `owner`, checked idle.
  absl::StatusOr<Session*> FindIdle(const SessionId& id, absl::string_view owner);
  // The session as it stood at `num_tokens` (a kept boundary, or now).
  absl::StatusOr<SessionSnapshot> SessionAt(const Session& session, int64_t num_tokens) const;
  // Deletes a named session and its boundaries.
  void EraseSession(Session* session);

  const Model& model_;
  const EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  const DeviceKind device_;
  const int32_t slot_capacity_;

  // nullptr without a state_dir. Declared before store_, which uses it.
  std::unique_ptr<SessionPersister> persister_;
  // Owned by the engine thread (and by Shutdown once the thread has stopped).
  SessionStore store_;
  // nullptr without a prefix disk directory. Declared before prefix_, which uses it.
  std::unique_ptr<PrefixDisk> prefix_disk_;
  PrefixStore prefix_;
  SessionCheckpoints boundaries_;
  std::deque<std::unique_ptr<Job>> waiting_;
  std::vector<std::unique_ptr<Job>> active_;
  absl::flat_hash_map<JobId, Job*> jobs_;
  int64_t step_ = 0;
  bool stop_requested_ = false;
  absl::Time last_expiry_ = absl::InfinitePast();
  // Two decode step buffers: on an asynchronous backend one is in flight while the host emits
  // the other's tokens.
  std::array<DecodeStep, 2> decode_steps_;
  int next_decode_step_ = 0;
  // The step launched and not yet collected (asynchronous backends only, between two Steps).
  DecodeStep* in_flight_ = nullptr;
  // A step's prefill: its items, their jobs, and a sampled row per prompt that ends in it.
  DecodeStep prefill_sample_;
  std::vector<PrefillItem> prefill_items_;
  std::vector<Job*> prefill_jobs_;
  // Per-step scratch, sized once: no allocation in a step.
  std::vector<JobView> views_;
  std::vector<const Job*> prefill_leaders_;
  StepPlan plan_;
  std::vector<std::pair<JobId, FinishReason>> finished_;

  mutable absl::Mutex mu_;
  struct Queued {
    Op op;
    // The owner of a session operation, whose queued work ends when it runs; nullopt for a
    // request (queued until it gets a slot or ends) and for PostAlways's entries.
    std::optional<std::string> op_owner;
  };
  std::deque<Queued> inbox_ ABSL_GUARDED_BY(mu_);
  // Submitted requests not yet active (in the inbox or waiting for a slot).
  int32_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;
  // Session operations in the inbox.
  int32_t queued_ops_ ABSL_GUARDED_BY(mu_) = 0;
  // Each owner's share of queued_requests_ + queued_ops_; owners with none have no entry.
  absl::flat_hash_map<std::string, int32_t> queued_by_owner_ ABSL_GUARDED_BY(mu_);
  // Requests holding a slot (active_.size(), kept where Shutdown can wait on it).
  int32_t active_requests_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);

  // Serialises Shutdown callers.
  absl::Mutex shutdown_mu_;

  struct Instruments {
    Counter& steps;
    Counter& prompt_tokens;
    Counter& generated_tokens;
    Counter& hibernations;
    Counter& expired_sessions;
    Counter& generations_length;
    Counter& generations_stop;
    Counter& generations_eos;
    Counter& generations_cancelled;
    Counter& generations_failed;
    Histogram& batch_size;
    Histogram& prefill_chunk;
    Histogram& prefill_step;
    Histogram& time_to_first_token;
    Histogram& inter_token_latency;
    Gauge& queue_depth;
    Gauge& active_requests;
    Gauge& free_slots;
    Gauge& slot_capacity;
    Gauge& resident_sessions;
    Gauge& hibernated_sessions;
    Gauge& ephemeral_sessions;
    Counter& prefix_hits;
    Counter& prefix_miss_no_prefix;
    Counter& prefix_miss_evicted;
    Counter& prefix_miss_too_short;
    Counter& prefix_tokens_saved;
    Counter& prefix_checkpoints;
    Counter& prefix_evictions;
    Gauge& prefix_bytes;
    Gauge& prefix_entries;
    Gauge& session_checkpoint_bytes;
    Counter& evictions_to_disk;
    Counter& loads_from_disk;
    Gauge& session_host_bytes;
    Gauge& disk_sessions;
    Gauge& prefix_disk_bytes;
    Gauge& prefix_disk_states;
    Counter& prefix_disk_reads;
    Counter& tenant_max_sessions_rejections;
    Counter& tenant_max_queued_rejections;
  };
  Instruments m_;
  int64_t hibernations_reported_ = 0;
  int64_t prefix_evictions_reported_ = 0;
  int64_t evictions_to_disk_reported_ = 0;
  int64_t loads_from_disk_reported_ = 0;
  int64_t prefix_disk_reads_reported_ = 0;
  int64_t tenant_session_rejections_reported_ = 0;

  std::thread thread_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_ENGINE_H_
