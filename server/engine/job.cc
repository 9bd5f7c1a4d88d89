#include "server/engine/job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace linserve {
Job::Job(JobId id, GenerateRequest request, std::shared_ptr<TokenSink> sink, const Model& model,
         absl::Time submit_time, int32_t choice)
    : id_(id),
      request_(std::move(request)),
      sink_(std::move(sink)),
      model_(model),
      submit_time_(submit_time),
      detokenizer_(*model.tokenizer),
      stop_matcher_(request_.stop),
      choice_(choice),
      prompt_detokenizer_(*model.tokenizer) {
  usage_.seed = request_.sampling.seed;
}

absl::Status Job::Activate(int32_t max_prompt_tokens) {
  SessionHistory& history = session_->history;
  const bool add_bos = history.num_tokens() == 0 && model_.config.bos_token_id >= 0;
  const int64_t total = static_cast<int64_t>(history.pending().size()) + (add_bos ? 1 : 0) +
                        request_.prompt.size();
  if (total > max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: ", request_.prompt.size(), " tokens plus the session's ",
        history.pending().size(), " unprocessed ones (left by a cancelled request) exceed ",
        "max_prompt_tokens (", max_prompt_tokens, ")"));
  }
  if (const std::shared_ptr<const CompiledConstraint>& constraint = request_.constraint;
      constraint != nullptr) {
    // The session's document continues when it is this constraint's and unfinished.
    if (session_->constraint.has_value() && session_->constraint->spec == constraint->spec()) {
      absl::StatusOr<GrammarMatcher> stored =
          GrammarMatcher::Deserialize(constraint, session_->constraint->matcher);
      if (!stored.ok()) {
        return absl::Status(stored.status().code(),
                            absl::StrCat("the session's constraint state: ",
                                         stored.status().message()));
      }
      if (!stored->ended() && !stored->IsComplete()) matcher_ = *std::move(stored);
    }
    if (!matcher_.has_value()) matcher_.emplace(constraint);
  }
  knows_history_ = history.num_tokens() == 0;
  feed_ = history.TakePending();
  prompt_start_ = feed_.size();
  if (add_bos) feed_.push_back(model_.config.bos_token_id);
  feed_.insert(feed_.end(), request_.prompt.begin(), request_.prompt.end());
  history.Append(new_prompt_tokens());
  prompt_scored_ = static_cast<int64_t>(feed_.size() - request_.prompt.size());
  usage_.prompt_tokens = static_cast<int32_t>(feed_.size() - prompt_start_);
  usage_.session_tokens = history.num_tokens();

  active_ = true;
  return absl::OkStatus();
}

void Job::HoldFollowers(std::vector<std::unique_ptr<Job>> followers) {
  followers_ = std::move(followers);
}

void Job::ActivateAsChoice(const Job& leader) {
  session_->history = leader.session_->history;
  feed_ = leader.feed_;
  prompt_start_ = leader.prompt_start_;
  knows_history_ = leader.knows_history_;
  prompt_scored_ = leader.prompt_scored_;
  matcher_ = leader.matcher_;
  usage_.prompt_tokens = leader.usage_.prompt_tokens;
  usage_.session_tokens = leader.usage_.session_tokens;
  awaiting_fork_ = true;
  active_ = true;
}

void Job::ForkedAt(int64_t fed) {
  fed_ = fed;
  awaiting_fork_ = false;
  forked_ = true;
}

absl::Span<const TokenId> Job::new_prompt_tokens() const {
  return absl::MakeConstSpan(feed_).subspan(prompt_start_);
}

absl::Span<const TokenId> Job::PeekPrefill(int32_t n) const {
  return absl::MakeConstSpan(feed_).subspan(fed_, n);
}

void Job::SkipPrefill(int64_t n) {
  fed_ = n;
  usage_.cached_prompt_tokens = static_cast<int32_t>(n);
}

std::vector<TokenId> Job::History(int64_t n) const {
  std::vector<TokenId> tokens(feed_.begin(), feed_.begin() + std::min<int64_t>(n, feed_.size()));
  const int64_t sampled = n - static_cast<int64_t>(tokens.size());
  tokens.insert(tokens.end(), sampled_tokens_.begin(), sampled_tokens_.begin() + sampled);
  return tokens;
}

void Job::ScorePrompt(int64_t first, int64_t n, absl::Span<const float> logits,
                      Emitter& emitter, std::vector<int32_t>& ids) {
  const int64_t vocab = model_.config.vocab_size;
  const int32_t alternatives = request_.prompt_logprobs;
  const int64_t end = static_cast<int64_t>(feed_.size());
  std::vector<PromptToken> scored;
  // Position p's logprob is in the logits of position p - 1.
  for (; prompt_scored_ < end && prompt_scored_ <= first + n; ++prompt_scored_) {
    const int64_t p = prompt_scored_;
    PromptToken token;
    token.id = feed_[static_cast<size_t>(p)];
    if (p >= 1) {
      const int64_t row = p - 1 - first;
      if (row < 0) break;  // its logits came before this chunk: never, chunks come in order
      const absl::Span<const float> row_logits = logits.subspan(row * vocab, vocab);
      token.top_logprobs.resize(static_cast<size_t>(alternatives));
      token.logprob =
          ScoreInto(row_logits, token.id, alternatives, ids, token.top_logprobs.data());
    }
    token.text = prompt_detokenizer_.Push(token.id);
    if (p + 1 == end) token.text += prompt_detokenizer_.Flush();
    scored.push_back(std::move(token));
  }
  if (scored.empty()) return;
  emitter.Post(id_, [sink = sink_, scored = std::move(scored)]() { sink->OnPromptTokens(scored); });
}

void Job::DecodeDone(bool fed_ahead) {
  if (fed_ahead) {
    pick_fed_ahead_ = true;
  } else {
    last_token_.reset();
  }
  ++picks_in_flight_;
}

absl::Status Job::FillMask(absl::Span<uint32_t> mask) const {
  if (absl::Status s = matcher_->FillMask(mask); !s.ok()) return s;
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t word) { return word == 0; })) {
    return absl::FailedPreconditionError(
        absl::StrCat("constraint: after ", generated_,
                     " generated tokens no token of the model's vocabulary can continue the "
                     "document (and it may not end here)"));
  }
  return absl::OkStatus();
}

absl::Status Job::Sampled(TokenId token) {
  if (picks_in_flight_ > 0) --picks_in_flight_;  // a prefill's pick was never in flight
  if (matcher_.has_value()) {
    if (absl::Status s = matcher_->Accept(token); !s.ok()) {
      // The pick came from the mask, so a refusal is the backend's fault, not the request's.
      if (absl::IsInvalidArgument(s)) {
        return absl::InternalError(absl::StrCat("the model backend picked token ", token,
                                                " outside the constraint's mask: ", s.message()));
      }
      return s;
    }
  }
  if (pick_fed_ahead_) {
    pick_fed_ahead_ = false;  // consumed already by the step launched ahead
  } else {
    last_token_ = token;
  }
  ++sampled_;
  if (knows_history_) sampled_tokens_.push_back(token);
  return absl::OkStatus();
}

bool Job::sampled_all() const {
  return sampled_ >= request_.max_new_tokens ||
         (matcher_.has_value() && (matcher_->ended() || matcher_->IsComplete()));
}

bool Job::decode_blocked() const {
  if (picks_in_flight_ == 0) return sampled_all();
  return constrained() || sampled_ + picks_in_flight_ >= request_.max_new_tokens;
}

std::optional<FinishReason> Job::Emit(TokenId token, float logprob,
                                      absl::Span<const TokenLogprob> top_logprobs, absl::Time now,
                                      Emitter& emitter) {
  ++generated_;
  session_->history.Append({token});
  usage_.generated_tokens = generated_;
  usage_.session_tokens = session_->history.num_tokens();

  inter_token_.reset();
  if (!first_token_time_.has_value()) {
    first_token_time_ = now;
    usage_.time_to_first_token = now - submit_time_;
  } else {
    inter_token_ = now - *last_token_time_;
  }
  last_token_time_ = now;

  GeneratedToken out;
  out.id = token;
  if (request_.top_logprobs > 0) {
    out.logprob = logprob;
    out.top_logprobs.assign(top_logprobs.begin(), top_logprobs.end());
    // Under a constraint the alternatives are of the masked distribution: when the mask allows
    // fewer tokens than asked for, the backend fills the rest with disallowed ones at -inf
    // (backend.h), which are no alternatives (and no JSON number).
    while (!out.top_logprobs.empty() && std::isinf(out.top_logprobs.back().logprob)) {
      out.top_logprobs.pop_back();
    }
  }

  std::optional<FinishReason> finish;
  std::string text;
  if (token == model_.config.eos_token_id && !request_.ignore_eos) {
    // Under a constraint EOS was accepted only where the document may end.
    finish = matcher_.has_value() ? FinishReason::kConstraintComplete : FinishReason::kEos;
  } else if (std::find(request_.stop_token_ids.begin(), request_.stop_token_ids.end(), token) !=
             request_.stop_token_ids.end()) {
    finish = FinishReason::kStop;
  } else {
    text = stop_matcher_.Push(detokenizer_.Push(token));
    if (stop_matcher_.matched()) finish = FinishReason::kStop;
  }
  if (!finish.has_value() && matcher_.has_value() && matcher_->IsComplete()) {
    finish = FinishReason::kConstraintComplete;
  }
  if (!finish.has_value() && generated_ >= request_.max_new_tokens) finish = FinishReason::kLength;
  emitter.StageToken(id_, sink_, std::move(out), std::move(text));
  return finish;
}

void Job::SettleSession() {
  if (!active_) return;
  // Whatever the client was sent or asked to feed but the model has not consumed stays in the
  // session, to be fed first next time.
  std::vector<TokenId> unfed(feed_.begin() + fed_, feed_.end());
  if (last_token_.has_value()) unfed.push_back(*last_token_);
  session_->history.SetPending(std::move(unfed));
  usage_.session_tokens = session_->history.num_tokens();
  if (session_->ephemeral) return;
  if (matcher_.has_value()) {
    session_->constraint =
        ConstraintState{.spec = request_.constraint->spec(), .matcher = matcher_->Serialize()};
  } else {
    session_->constraint.reset();
  }
}

absl::AnyInvocable<void(absl::Status written) &&> Job::Report(const absl::Status& status,
                                                              FinishReason reason,
                                                              absl::Time now) {
  usage_.total_time = now - submit_time_;
  GenerationResult result;
  result.reason = reason;
  result.usage = usage_;
  if (status.ok()) {
    result.text = stop_matcher_.Push(detokenizer_.Flush());
    if (stop_matcher_.matched()) {
      if (reason == FinishReason::kLength) result.reason = FinishReason::kStop;
    } else {
      result.text += stop_matcher_.Flush();
    }
  }
  return [sink = sink_, status, result = std::move(result)](absl::Status written) mutable {
    sink->OnFinish(status.ok() ? written : status, result);
  };
}

}  // namespace linserve
