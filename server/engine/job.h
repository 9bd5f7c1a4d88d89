// Job: one generation in the engine, from submission to its sink's OnFinish. Holds the request,
// the tokens still to feed, the streaming detokenizer, the stop-string matcher and, under a
// constraint (structured output), the grammar matcher of its document (the backend samples: see
// Backend's sampling contract), and keeps its session's token accounting exact: every token it
// feeds or emits is counted in the session the moment it becomes part of it.
//
// Engine thread only.
#ifndef LINSERVE_SERVER_ENGINE_JOB_H_
#define LINSERVE_SERVER_ENGINE_JOB_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "model/model.h"
#include "model/backend/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "server/constraints/grammar_matcher.h"
#include "server/engine/job_id.h"
#include "server/engine/emitter.h"
#include "server/engine/request.h"
#include "server/sessions/session_store.h"
#include "server/engine/stop_matcher.h"
#include "server/engine/token_sink.h"

namespace linserve {

class Job {
 public:
  // `choice`: which of the request's n choices this job generates (its seed is already the
  // choice's).
  Job(JobId id, GenerateRequest request, std::shared_ptr<TokenSink> sink, const Model& model,
      absl::Time submit_time, int32_t choice = 0);

  JobId id() const { return id_; }
  const GenerateRequest& request() const { return request_; }
  absl::Time submit_time() const { return submit_time_; }

  // The session this job runs on, once bound (the engine marks it busy).
  Session* session() const { return session_; }
  void Bind(Session* session) { session_ = session; }
  bool active() const { return active_; }

  // Starts the job on its bound, resident session: the session's pending tokens, a BOS when
  // the session is empty, then the prompt become the tokens to feed, and the prompt joins the
  // session. Under a constraint the document continues where the session's constraint state
  // left it when that state has the same spec and its document is unfinished, else a new one
  // starts. INVALID_ARGUMENT (changing nothing) when the tokens exceed `max_prompt_tokens`, or
  // the error of a session constraint state that does not load.
  absl::Status Activate(int32_t max_prompt_tokens);
  // The tokens Activate added to the session (BOS and prompt): what the slot's sampler must
  // count as seen on top of what it had.
  absl::Span<const TokenId> new_prompt_tokens() const;

  // Whether the job knows every token its session's state has consumed: the session was empty
  // when the job started, so the tokens to feed are the whole sequence from position 0 (and the
  // job can start from, and leave, prefix checkpoints).
  bool knows_history() const { return knows_history_; }
  // The tokens to feed, BOS and prompt included; position i of the sequence when
  // knows_history().
  absl::Span<const TokenId> feed() const { return feed_; }
  // The slot already holds the state after the first `n` tokens to feed (a cached prefix):
  // prefill starts after them and Usage.cached_prompt_tokens says so. Before any prefill.
  void SkipPrefill(int64_t n);
  // With knows_history(): the first `n` tokens of the session, the fed prompt then the sampled
  // tokens (n <= feed().size() + the tokens sampled so far).
  std::vector<TokenId> History(int64_t n) const;

  int64_t prefill_remaining() const { return static_cast<int64_t>(feed_.size()) - fed_; }
  // The next `n` tokens to prefill (n <= prefill_remaining()).
  absl::Span<const TokenId> PeekPrefill(int32_t n) const;
  // Records that `n` prefill tokens reached the model.
  void PrefillDone(int32_t n) { fed_ += n; }
  // Tokens of feed() already fed (or skipped as a cached prefix).
  int64_t fed() const { return fed_; }
  // Whether the job picks tokens once the prompt is fed (max_new_tokens > 0); a job that does
  // not ends when its prompt is fed.
  bool samples() const { return request_.max_new_tokens > 0; }

  // ---- Prompt logprobs (request().prompt_logprobs >= 0) ----
  bool scores_prompt() const { return request_.prompt_logprobs >= 0; }
  // The tokens to feed through a prefill that returns every position's logits: all of them
  // but the last when the job samples (the last one's logits are the first pick's).
  int64_t scored_feed() const {
    return static_cast<int64_t>(feed_.size()) - (samples() ? 1 : 0);
  }
  // The chunk feed()[first, first + n) was fed and `logits` holds its n positions' logits
  // (vocab_size floats each, row-major): hands the sink every prompt token whose logprob they
  // complete (and a first prompt token that has nothing before it), through `emitter`. `ids`:
  // the caller's scratch. Chunks come in feed order.
  void ScorePrompt(int64_t first, int64_t n, absl::Span<const float> logits, Emitter& emitter,
                   std::vector<int32_t>& ids);

  // ---- Choices (request().n > 1) ----
  // One job per choice. The leader (the choice on the request's session, else choice 0) feeds
  // the prompt; the followers wait, each holding a slot, until it has fed all but the prompt's
  // last token, and start from a copy of its state (the engine's ForkChoices).
  int32_t choice() const { return choice_; }
  // The leader holds its followers until the group is admitted, then the ids of those waiting
  // for its fork.
  void HoldFollowers(std::vector<std::unique_ptr<Job>> followers);
  std::vector<std::unique_ptr<Job>> TakeFollowers() { return std::move(followers_); }
  bool holds_followers() const { return !followers_.empty(); }
  void AwaitForks(std::vector<JobId> followers) { pending_forks_ = std::move(followers); }
  std::vector<JobId> TakePendingForks() { return std::move(pending_forks_); }
  bool forks_pending() const { return !pending_forks_.empty(); }
  // A follower starts where its leader, just activated, starts: the tokens to feed, its
  // session's history (into the follower's ephemeral session) and constrained document, its
  // usage's prompt counts. Then it waits for the fork.
  void ActivateAsChoice(const Job& leader);
  bool awaiting_fork() const { return awaiting_fork_; }
  // The follower's slot now holds the leader's state after the first `fed` tokens to feed.
  void ForkedAt(int64_t fed);
  bool forked() const { return forked_; }

  // The token to feed in the next decode step (the last sampled one).
  TokenId decode_token() const { return *last_token_; }
  // Records that a decode step was launched for the job: it fed the last sampled token (which
  // may not have been emitted yet: a pipelined step feeds it before the host has handed it to
  // the sink) or, with `fed_ahead` (launch-ahead), the pick of the job's row in the step still
  // in flight, which is then consumed the moment it lands (Sampled). Either way one more pick
  // is in flight.
  void DecodeDone(bool fed_ahead);
  // Picks launched and not yet passed to Sampled (0 to 2).
  int32_t picks_in_flight() const { return picks_in_flight_; }
  // Row of this job in the engine's decode step buffer `buffer` (0 or 1), or -1 when it has
  // none there: set when a step is launched, cleared when its row is emitted or dropped.
  int32_t decode_row(int buffer) const { return decode_rows_[buffer]; }
  void set_decode_row(int buffer, int32_t row) { decode_rows_[buffer] = row; }

  // The engine step at which the job last got a token (see JobView).
  int64_t last_token_step() const { return last_token_step_; }
  void set_last_token_step(int64_t step) { last_token_step_ = step; }

  // Whether the request has a constraint: each pick then needs a mask (FillMask).
  bool constrained() const { return matcher_.has_value(); }
  // Under a constraint: writes the tokens the next pick may choose (GrammarMatcher::FillMask).
  // The matcher's errors, or FAILED_PRECONDITION when no token of the vocabulary may follow.
  absl::Status FillMask(absl::Span<uint32_t> mask) const;

  // The backend picked `token` after everything fed so far: it becomes the token to feed next
  // (decode_token()) unless a step launched ahead feeds it already (DecodeDone), and Emit must
  // hand it to the sink before the next one is sampled. Under a
  // constraint the document advances by it first; when it may not, nothing is recorded and the
  // job must fail with the error returned: the matcher's (RESOURCE_EXHAUSTED), or INTERNAL for
  // a token outside the mask.
  absl::Status Sampled(TokenId token);
  // Whether every token the request may generate has been sampled (the job ends when the last
  // is emitted): max_new_tokens, or a constrained document that is over (EOS, or nothing may
  // follow). Such a job is not decoded again.
  bool sampled_all() const;
  // Whether the job must not be in the next decode step: every token it may generate is
  // sampled or being picked (sampled_all() counting the picks in flight), or it is constrained
  // and its mask waits for the pick in flight.
  bool decode_blocked() const;
  // An error that ends the job once its last sampled token has been emitted (a mask that could
  // not be computed while that token was on its way to the sink); OK otherwise.
  const absl::Status& failure() const { return failure_; }
  void set_failure(absl::Status status) { failure_ = std::move(status); }
  // Hands the token last passed to Sampled (with its logprob and top alternatives when the
  // request asked for them) to the sink through `emitter` (staged: the engine flushes), counts
  // it in the session and says whether the generation is over (and why): under a constraint,
  // EOS or a document nothing may extend ends it with kConstraintComplete. `now` times the
  // token.
  std::optional<FinishReason> Emit(TokenId token, float logprob,
                                   absl::Span<const TokenLogprob> top_logprobs, absl::Time now,
                                   Emitter& emitter);

  // Time since the previous token (nullopt for the first); set by Emit.
  std::optional<absl::Duration> last_inter_token_latency() const { return inter_token_; }
  int32_t generated_tokens() const { return generated_; }

  // Ends the job's use of its session: tokens the model has not consumed (the rest of the
  // prompt, the last sampled token) become the session's pending tokens, and the session keeps
  // the constrained document's state (none without a constraint).
  void SettleSession();
  // What the sink must hear last: a call of its OnFinish, to be made once the session's change
  // has been written, with the write's outcome (it owns what it needs and may outlive the job).
  // With an OK status `reason` says why the job ended and the held-back text is released; a
  // failed write turns an OK status into the write's error.
  absl::AnyInvocable<void(absl::Status written) &&> Report(const absl::Status& status,
                                                           FinishReason reason, absl::Time now);
  const Usage& usage() const { return usage_; }

 private:
  const JobId id_;
  GenerateRequest request_;
  std::shared_ptr<TokenSink> sink_;
  const Model& model_;
  const absl::Time submit_time_;

  Session* session_ = nullptr;
  bool active_ = false;
  std::vector<TokenId> feed_;
  bool knows_history_ = false;
  // With knows_history_: every token sampled, in order.
  std::vector<TokenId> sampled_tokens_;
  size_t prompt_start_ = 0;  // feed_[prompt_start_, end): BOS and the prompt
  int64_t fed_ = 0;
  std::optional<TokenId> last_token_;  // sampled, not yet fed
  int32_t picks_in_flight_ = 0;
  bool pick_fed_ahead_ = false;  // the pick in flight is fed by the step launched after it
  int64_t last_token_step_ = -1;
  std::array<int32_t, 2> decode_rows_ = {-1, -1};
  int32_t sampled_ = 0;
  int32_t generated_ = 0;
  std::optional<absl::Time> first_token_time_;
  std::optional<absl::Time> last_token_time_;
  std::optional<absl::Duration> inter_token_;
  Usage usage_;
  // Under a constraint: the document, advanced by every token sampled.
  std::optional<GrammarMatcher> matcher_;
  absl::Status failure_;

  StreamingDetokenizer detokenizer_;
  StopMatcher stop_matcher_;
  const int32_t choice_;
  std::vector<std::unique_ptr<Job>> followers_;
  std::vector<JobId> pending_forks_;
  bool awaiting_fork_ = false;
  bool forked_ = false;
  // With scores_prompt(): the next feed position whose prompt token the sink has not been
  // handed (from the request's first prompt token on), and the prompt's own detokenizer.
  int64_t prompt_scored_ = 0;
  StreamingDetokenizer prompt_detokenizer_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_JOB_H_
