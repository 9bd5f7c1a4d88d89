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
// the next plan) while the device computes. On a backend that launches ahead
// (Backend::max_steps_in_flight() == 2) a step launches the next decode before collecting the
// previous one, its rows fed on the device with the picks still in flight, so the device never
// waits for the host between steps. Either way a request that ends on a token (EOS, a stop) has
// by then had that token fed to the step in flight: the step's pick for it is dropped, and the
// session keeps the fed token as consumed rather than pending, which continues identically. A
// token is only ever fed ahead when it is handed to the sink in the same engine step, so no
// request ends between the two (docs/architecture.md §2.2 states the rule).
//
// What a session holds after a request: every token of its prompt and every token handed to
// the sink, even when the request was cancelled or failed part-way. Tokens the model has not
// consumed yet (the last one sent; the rest of a prompt cut short by a cancellation) are kept
// as pending and fed first by the session's next request, so the session's state always
// corresponds exactly to the tokens its client was sent.
//
// Under a constraint (structured output) a job's matcher advances when its pick is collected
// (Job::Sampled), before the next launch computes the next mask; the masks live in the step
// buffers until the step is collected. docs/architecture.md §2.2 says how.
//
// The parts, each in its own file: EngineOptions (engine_options.h), the Inbox (inbox.h), the
// session operations (session_operations.h), prefix planning (prefix_planner.h), the
// instruments (engine_metrics.h); the stores they use are in server/sessions and server/prefix.
#ifndef LINSERVE_SERVER_ENGINE_ENGINE_H_
#define LINSERVE_SERVER_ENGINE_ENGINE_H_

#include <array>
#include <atomic>
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
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/token_vocabulary.h"
#include "server/engine/emitter.h"
#include "server/engine/engine_metrics.h"
#include "server/engine/engine_options.h"
#include "server/engine/inbox.h"
#include "server/engine/job.h"
#include "server/engine/job_id.h"
#include "server/engine/prefix_planner.h"
#include "server/engine/request.h"
#include "server/engine/scheduler.h"
#include "server/engine/session_operations.h"
#include "server/engine/slot_reads.h"
#include "server/engine/step_phases.h"
#include "server/engine/token_sink.h"
#include "server/metrics/metrics.h"
#include "server/prefix/prefix_disk.h"
#include "server/prefix/prefix_store.h"
#include "server/sessions/session_id.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/session_store.h"
#include "server/sessions/turn_boundaries.h"

namespace linserve {

// Most logits (floats) one scored prefill chunk returns (Engine::ScorePrefill): 64 MiB, so a
// prompt whose logprobs are asked for is fed 2^24 / vocab_size positions at a time at most
// (8,192 with a 2,048-token vocabulary, 333 with GPT-2's).
inline constexpr int64_t kScoredLogitFloats = int64_t{1} << 24;

class Engine {
 public:
  template <typename T>
  using Callback = SessionOperations::Callback<T>;
  using StatusCallback = SessionOperations::StatusCallback;

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
  // it; RESOURCE_EXHAUSTED when the queue is full or request.tenant has tenant_max_queued
  // waiting, UNAVAILABLE once shutting down. On success the sink will hear OnFinish exactly
  // once (NOT_FOUND for an unknown session, ABORTED when the session is busy, ...).
  absl::StatusOr<JobId> Submit(GenerateRequest request, std::shared_ptr<TokenSink> sink);
  // Submit for a request of request.n choices, one sink each (sinks[i] hears choice i): n jobs,
  // whose ids it returns (cancel them all: a choice not admitted yet ends only with the
  // request's leader). They are admitted together (n state slots at once; the requests queued
  // after them wait meanwhile, but those whose session holds a slot already) and count as n
  // requests against the queue limits; one prefill feeds the prompt, forked before its last
  // token. INVALID_ARGUMENT when n cannot fit: more than the slots, max_queue_depth or
  // tenant_max_queued; RESOURCE_EXHAUSTED (through the sinks) when nothing is running and the
  // free slots are held by other waiting requests' sessions.
  absl::StatusOr<std::vector<JobId>> Submit(GenerateRequest request,
                                            std::vector<std::shared_ptr<TokenSink>> sinks);
  // Thread-safe. Ends the job within one engine step: its sink hears OnFinish(CANCELLED).
  // Unknown or finished jobs are ignored.
  void Cancel(JobId job);

  // Session operations on behalf of `tenant`; thread-safe. session_operations.h says what
  // each does and answers.
  void CreateSession(std::string tenant, Callback<SessionInfo> done,
                     std::optional<SessionId> id = std::nullopt);
  void GetSession(std::string tenant, SessionId id, Callback<SessionInfo> done);
  void ListSessions(std::string tenant, std::optional<SessionId> after, int32_t limit,
                    Callback<SessionPage> done);
  void ForkSession(std::string tenant, SessionId id, Callback<SessionInfo> done);
  void ForkSessionAt(std::string tenant, SessionId id, int64_t num_tokens,
                     Callback<SessionInfo> done);
  void RewindSession(std::string tenant, SessionId id, int64_t num_tokens,
                     Callback<SessionInfo> done);
  void DeleteSession(std::string tenant, SessionId id, StatusCallback done);
  void ExportSession(std::string tenant, SessionId id, Callback<std::string> done);
  void ImportSession(std::string tenant, absl::string_view snapshot, Callback<SessionInfo> done,
                     std::optional<SessionId> id = std::nullopt);

  // Thread-safe.
  EngineStats stats() const;
  bool draining() const { return inbox_.draining(); }
  // False while a write to state_dir is failing (/readyz reports not ready meanwhile).
  bool writes_healthy() const { return store_.writes_healthy(); }
  const Model& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  // Thread-safe. The compiled constraints of this engine's model (structured output): requests
  // carry constraints compiled here (GenerateRequest::constraint; one compiled for another
  // vocabulary is refused), and imported or restored sessions' constraint states are checked
  // against them.
  ConstraintCache& constraints() { return *constraints_; }
  DeviceKind device() const { return device_; }
  int32_t slot_capacity() const { return slot_capacity_; }
  // The largest snapshot ImportSession accepts.
  int64_t max_snapshot_bytes() const;

  // Stops admission (UNAVAILABLE from then on), lets queued and running requests finish for up
  // to `drain_deadline`, cancels what remains (finish reason kCancelled), stops the engine
  // thread and waits until every session change is written to options.state_dir. Returns the
  // persistence outcome. Thread-safe; later calls return at once with OK.
  absl::Status Shutdown(absl::Duration drain_deadline);

 private:
  Engine(const Model& model, std::unique_ptr<Backend> backend,
         std::shared_ptr<ConstraintCache> constraints,
         std::unique_ptr<SessionPersister> persister, std::unique_ptr<PrefixDisk> prefix_disk,
         const EngineOptions& options, MetricsRegistry& metrics);

  // One decode step's rows and where the backend writes their samples. Sized once for
  // max_batch_size rows: no allocation in a step.
  struct DecodeStep {
    DecodeStep(size_t rows, int32_t mask_words);
    // The first `rows` rows of the sample buffers.
    SampleOutput Output(size_t rows);
    // Row `row`'s token mask, for a constrained job; valid until the step is collected.
    absl::Span<uint32_t> Mask(size_t row);
    int64_t step = 0;  // the engine step that launched it
    std::vector<DecodeItem> items;
    // The job of each row; nullptr once the job has ended (its row is then dropped).
    std::vector<Job*> jobs;
    std::vector<TokenId> tokens;
    std::vector<float> logprobs;
    std::vector<TokenLogprob> top_logprobs;
    const int32_t mask_words;
    std::vector<uint32_t> masks;  // rows × mask_words
  };

  // The engine thread's loop.
  void Run();
  void Accept(std::unique_ptr<Job> job);
  void AdmitWaiting();
  // One engine step. On an asynchronous backend the loop is pipelined: the step collects the
  // decode launched by the previous one (its tokens become the next inputs), launches the next
  // decode and only then hands the collected tokens to their sinks, so the host's work (stop
  // matching, detokenizing, the transport, admission, planning) overlaps the device's. With
  // launch-ahead the next decode is launched first, fed from the picks in flight, and the
  // previous one collected after.
  void Step();
  // Launches a decode of `batch` into the free step buffer (the back of in_flight_ on success).
  // With launch-ahead a row whose job has a pick in the step in flight feeds that pick.
  void LaunchDecode(absl::Span<const JobId> batch);
  // Waits for the oldest step in flight; its live rows' jobs get their tokens (Job::Sampled).
  // Returns the step, or nullptr when the backend failed (its jobs have then failed).
  DecodeStep* CollectDecode();
  bool InFlight(const DecodeStep& step) const;
  // Hands each live row of a collected step to its job's sink and ends the jobs that are done.
  void EmitDecoded(DecodeStep& step);
  // Ends the jobs in finished_: OK with their finish reason, or kError with Job::failure().
  void CompleteFinished();
  // Feeds the step's prompt chunks in one Backend::PrefillBatch call; the prompts that end in
  // it get their first token. A job that scores its prompt (prompt_logprobs) has its chunks
  // before the last token fed on their own by ScorePrefill instead.
  void RunPrefill(absl::Span<const PrefillChunk> chunks);
  // Feeds the next `n` (> 0) of the job's scored tokens with Backend::Prefill returning every
  // position's logits (at most kScoredLogitFloats / vocab_size positions), and hands the prompt
  // tokens they score to its sink; a job that generates nothing ends once its prompt is fed.
  // Fails the job on a backend error.
  // Returns the tokens fed (0 when the job failed).
  int64_t ScorePrefill(Job& job, int64_t n);
  // The leader of a request's choices has fed all but the prompt's last token: each follower
  // still waiting gets a copy of its slot (state, seen counts) and restarts its sampler with its
  // own seed. A follower whose copy fails fails alone.
  void ForkChoices(Job& leader);
  // AdmitWaiting for a leader holding its followers: a slot for each of them too, or none (the
  // group waits; the sessions it got meanwhile are given back). Says whether it got them.
  bool AdmitFollowers(Job& leader, absl::Time now);
  // Hands `token` (row `row` of `logprobs` and `top_logprobs`) to `job` (Job::Emit) and counts
  // it.
  std::optional<FinishReason> EmitSampled(Job& job, TokenId token, float logprob,
                                          absl::Span<const TokenLogprob> top_logprobs,
                                          absl::Time now);
  // A constrained job's pick was refused by its matcher (`status`): the pick is dropped (the
  // slot's penalty counts are set back to the session's) and the job fails with `status`.
  void FailOnConstraintError(Job& job, const absl::Status& status);
  // Drops `job`'s rows from the step buffers. A row in a step still in flight picks a token
  // that no one will see; the slot's seen counts then include it, so a named session that keeps
  // the slot gets its counts back from the session.
  void DropDecodeRows(Job& job);
  // Takes a job out of the waiting or active list; nullptr if it is in neither.
  std::unique_ptr<Job> Extract(JobId id);
  // Ends a job and releases its session. `reason`: why it finished (kCancelled with a CANCELLED
  // status, kError with any other error).
  void Complete(std::unique_ptr<Job> job, const absl::Status& status, FinishReason reason);
  // At a job's end (`status`: its outcome), the state its session reached becomes a prefix
  // checkpoint (a job that knows the history) and a turn boundary (a named session, with
  // turn boundaries on), both read asynchronously (reads_); not after a backend failure, which
  // leaves the state unknown.
  void ExportTurnEnd(Job& job, Session* session, const absl::Status& status);
  // A backend failure leaves the job's session in an unknown state: fail the job and, for a
  // named session, delete the session.
  void FailOnBackendError(JobId id, const absl::Status& status);
  void CancelAll();
  void ExpireSessions(absl::Time now);
  void PublishStats();

  const Model& model_;
  const EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  const DeviceKind device_;
  const int32_t slot_capacity_;
  // Shared with the persister, which checks the constraint states it reads with it.
  const std::shared_ptr<ConstraintCache> constraints_;
  // Declared before the stores and the inbox, which count into it.
  EngineMetrics metrics_;
  StepPhases phases_;
  // The sink calls (tokens, then each request's end), off the engine thread. Declared before
  // the stores, whose write-behind completions post to it.
  Emitter emitter_;
  Inbox inbox_;

  // nullptr without a state_dir. Declared before store_, which uses it.
  std::unique_ptr<SessionPersister> persister_;
  // Owned by the engine thread (and by Shutdown once the thread has stopped).
  SessionStore store_;
  // nullptr without a prefix disk directory. Declared before prefix_, which uses it.
  std::unique_ptr<PrefixDisk> prefix_disk_;
  PrefixStore prefix_;
  TurnBoundaries boundaries_;
  // Prefix checkpoints and turn boundaries, read off the step's path.
  SlotReads reads_;
  PrefixPlanner planner_;
  SessionOperations sessions_;

  std::deque<std::unique_ptr<Job>> waiting_;
  std::vector<std::unique_ptr<Job>> active_;
  absl::flat_hash_map<JobId, Job*> jobs_;
  std::atomic<uint64_t> next_job_id_{1};
  int64_t step_ = 0;
  bool stop_requested_ = false;
  absl::Time last_expiry_ = absl::InfinitePast();
  // Two decode step buffers: on an asynchronous backend one is in flight while the host emits
  // the other's tokens.
  std::array<DecodeStep, 2> decode_steps_;
  int next_decode_step_ = 0;
  // The steps launched and not yet collected, oldest first (asynchronous backends only): between
  // two Steps at most one; inside a Step that launches ahead, two.
  std::vector<DecodeStep*> in_flight_;
  // Whether the backend launches ahead (Backend::max_steps_in_flight() == 2).
  const bool launch_ahead_;
  // A step's prefill: its items, their jobs, and a sampled row per prompt that ends in it.
  DecodeStep prefill_sample_;
  std::vector<PrefillItem> prefill_items_;
  std::vector<Job*> prefill_jobs_;
  // ScorePrefill's logits (at most kScoredLogitFloats) and top-n scratch, grown on first use.
  std::vector<float> scored_logits_;
  std::vector<int32_t> scored_ids_;
  // Per-step scratch, sized once: no allocation in a step.
  std::vector<JobView> views_;
  StepPlan plan_;
  std::vector<std::pair<JobId, FinishReason>> finished_;

  mutable absl::Mutex stats_mu_;
  EngineStats stats_ ABSL_GUARDED_BY(stats_mu_);
  // Serialises Shutdown callers.
  absl::Mutex shutdown_mu_;
  std::thread thread_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_ENGINE_H_
