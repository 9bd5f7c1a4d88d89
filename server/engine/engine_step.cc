// Engine (engine.h): one engine step. The decode pipeline (two step buffers: on an asynchronous
// backend one is in flight while the host emits the other's tokens; with launch-ahead the next
// step is launched, fed from the first's picks on the device, before the first is collected),
// the batched prefill, and handing each sampled token to its job; the constraint masks are
// filled here, at each launch.
#include <algorithm>
#include <utility>

#include "server/engine/engine.h"
#include "spdlog/spdlog.h"

namespace linserve {

Engine::DecodeStep::DecodeStep(size_t rows, int32_t mask_words)
    : tokens(rows),
      logprobs(rows),
      top_logprobs(rows * kMaxTopLogprobs),
      mask_words(mask_words),
      masks(rows * static_cast<size_t>(mask_words)) {
  items.reserve(rows);
  jobs.reserve(rows);
}

absl::Span<uint32_t> Engine::DecodeStep::Mask(size_t row) {
  return absl::MakeSpan(masks).subspan(row * static_cast<size_t>(mask_words),
                                       static_cast<size_t>(mask_words));
}

SampleOutput Engine::DecodeStep::Output(size_t rows) {
  return {.tokens = absl::MakeSpan(tokens).subspan(0, rows),
          .logprobs = absl::MakeSpan(logprobs).subspan(0, rows),
          .top_logprobs = absl::MakeSpan(top_logprobs).subspan(0, rows * kMaxTopLogprobs)};
}

void Engine::Step() {
  DecodeStep* ready = nullptr;
  if (!launch_ahead_ && !in_flight_.empty()) {
    ScopedStepPhase phase(phases_, StepPhase::kCollect);
    ready = CollectDecode();
  }
  phases_.Enter(StepPhase::kPlan);
  views_.clear();
  planner_.BeginStep(active_);
  for (const auto& job : active_) {
    // A choice waiting for its leader's fork holds its slot and nothing else.
    if (job->awaiting_fork()) continue;
    // Ends at its emit, or waits for its pick in flight (launch-ahead).
    if (job->prefill_remaining() == 0 && job->decode_blocked()) continue;
    if (planner_.WaitsForPrefix(*job)) continue;
    views_.push_back({job->id(), job->prefill_remaining(), job->last_token_step()});
  }
  PlanStep(views_, options_.scheduler, plan_);
  ++step_;
  metrics_.steps.Increment();
  // Decode first: the sessions already streaming are the ones a long prompt must not stall.
  if (!plan_.decode.empty()) {
    phases_.Enter(StepPhase::kLaunch);
    LaunchDecode(plan_.decode);
    if (!in_flight_.empty() && !backend_->asynchronous()) {
      phases_.Enter(StepPhase::kCollect);
      ready = CollectDecode();
    }
  }
  // Launch-ahead: the step the previous Step launched is collected only now, with this one
  // queued behind it on the device.
  if (launch_ahead_ && !in_flight_.empty() && in_flight_.front()->step != step_) {
    phases_.Enter(StepPhase::kCollect);
    ready = CollectDecode();
  }
  if (ready != nullptr) {
    phases_.Enter(StepPhase::kEmit);
    EmitDecoded(*ready);
  }
  if (!plan_.prefill.empty()) {
    phases_.Enter(StepPhase::kPrefill);
    RunPrefill(plan_.prefill);
  }
}

bool Engine::InFlight(const DecodeStep& step) const {
  return std::find(in_flight_.begin(), in_flight_.end(), &step) != in_flight_.end();
}

void Engine::LaunchDecode(absl::Span<const JobId> batch) {
  const int buffer = next_decode_step_;
  DecodeStep& step = decode_steps_[buffer];
  step.step = step_;
  step.items.clear();
  step.jobs.clear();
  finished_.clear();
  for (JobId id : batch) {
    Job* job = jobs_.at(id);
    const size_t row = step.items.size();
    const uint32_t* allowed = nullptr;
    if (job->constrained()) {
      // The matcher has seen every token sampled so far (Job::Sampled), the one collected just
      // before this launch and not emitted yet included.
      const absl::Span<uint32_t> mask = step.Mask(row);
      if (absl::Status s = job->FillMask(mask); !s.ok()) {
        job->set_failure(std::move(s));
        finished_.emplace_back(id, FinishReason::kError);
        continue;
      }
      allowed = mask.data();
    }
    // With launch-ahead the other buffer is either in flight or emitted: a row there is a pick
    // the host has not seen, which this step feeds on the device.
    const int32_t previous_row = launch_ahead_ ? job->decode_row(1 - buffer) : -1;
    job->set_decode_row(buffer, static_cast<int32_t>(row));
    step.items.push_back({.slot = *job->session()->slot,
                          .token = previous_row >= 0 ? 0 : job->decode_token(),
                          .allowed_tokens = allowed,
                          .previous_row = previous_row});
    step.jobs.push_back(job);
  }
  // A job whose mask failed ends now, or, when its last token is still to be emitted (the step
  // collected before this launch), once it is (EmitDecoded). (With launch-ahead a constrained
  // job has no pick in flight when it is launched: Job::decode_blocked.)
  for (const auto& [id, reason] : finished_) {
    if (jobs_.at(id)->decode_row(1 - buffer) >= 0) continue;
    std::unique_ptr<Job> job = Extract(id);
    const absl::Status status = job->failure();
    Complete(std::move(job), status, FinishReason::kError);
  }
  if (step.items.empty()) return;
  metrics_.batch_size.Observe(static_cast<double>(step.items.size()));
  if (absl::Status status =
          backend_->LaunchDecodeAndSample(step.items, step.Output(step.items.size()));
      !status.ok()) {
    for (Job* job : step.jobs) FailOnBackendError(job->id(), status);
    return;
  }
  for (size_t i = 0; i < step.jobs.size(); ++i) {
    step.jobs[i]->DecodeDone(/*fed_ahead=*/step.items[i].previous_row >= 0);
  }
  in_flight_.push_back(&step);
  next_decode_step_ = 1 - buffer;
}

Engine::DecodeStep* Engine::CollectDecode() {
  DecodeStep& step = *in_flight_.front();
  in_flight_.erase(in_flight_.begin());
  const absl::Status status = backend_->CollectSamples();
  for (size_t i = 0; i < step.jobs.size(); ++i) {
    Job* job = step.jobs[i];
    if (job == nullptr) continue;
    if (!status.ok()) {
      FailOnBackendError(job->id(), status);
    } else if (absl::Status s = job->Sampled(step.tokens[i]); !s.ok()) {
      FailOnConstraintError(*job, s);  // drops the row
    }
  }
  return status.ok() ? &step : nullptr;
}

void Engine::FailOnConstraintError(Job& job, const absl::Status& status) {
  Session* session = job.session();
  if (session != nullptr && !session->ephemeral && session->slot.has_value()) {
    // The backend counted the refused pick as seen; the session never had it.
    if (absl::Status s = backend_->SetSeenCounts(*session->slot, session->history.SeenCounts());
        !s.ok()) {
      spdlog::error("session {}: restoring the penalty counts failed: {}", session->id.value,
                    s.ToString());
    }
  }
  Complete(Extract(job.id()), status, FinishReason::kError);
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
    std::optional<FinishReason> finish =
        EmitSampled(*job, step.tokens[i], step.logprobs[i],
                    absl::MakeConstSpan(step.top_logprobs).subspan(i * kMaxTopLogprobs),
                    now);
    if (job->last_inter_token_latency().has_value()) {
      metrics_.inter_token_latency.Observe(absl::ToDoubleSeconds(*job->last_inter_token_latency()));
    }
    // A mask that failed at the launch after this token (LaunchDecode) ends the job now.
    if (!finish.has_value() && !job->failure().ok()) finish = FinishReason::kError;
    if (finish.has_value()) finished_.emplace_back(job->id(), *finish);
  }
  CompleteFinished();
}

void Engine::CompleteFinished() {
  for (const auto& [id, reason] : finished_) {
    std::unique_ptr<Job> job = Extract(id);
    const absl::Status status = reason == FinishReason::kError ? job->failure() : absl::OkStatus();
    Complete(std::move(job), status, reason);
  }
}

std::optional<FinishReason> Engine::EmitSampled(Job& job, TokenId token, float logprob,
                                                absl::Span<const TokenLogprob> top_logprobs,
                                                absl::Time now) {
  const std::optional<FinishReason> finish = job.Emit(
      token, logprob,
      top_logprobs.subspan(0, static_cast<size_t>(job.request().top_logprobs)), now, emitter_);
  metrics_.generated_tokens.Increment();
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
    if (!InFlight(step) || session == nullptr || session->ephemeral ||
        !session->slot.has_value()) {
      continue;
    }
    // The backend orders this after the steps in flight, whose pick it undoes.
    if (absl::Status s =
            backend_->SetSeenCounts(*session->slot, session->history.SeenCounts());
        !s.ok()) {
      spdlog::error("session {}: restoring the penalty counts failed: {}", session->id.value,
                    s.ToString());
    }
  }
}

int64_t Engine::ScorePrefill(Job& job, int64_t n) {
  const int64_t vocab = backend_->config().vocab_size;
  n = std::min(n, std::max<int64_t>(1, kScoredLogitFloats / vocab));
  const int64_t first = job.fed();
  scored_logits_.resize(static_cast<size_t>(n * vocab));
  const absl::Span<float> logits = absl::MakeSpan(scored_logits_).subspan(0, n * vocab);
  const SlotId slot = *job.session()->slot;
  if (absl::Status s = backend_->Prefill(slot, job.PeekPrefill(static_cast<int32_t>(n)), logits);
      !s.ok()) {
    FailOnBackendError(job.id(), s);
    return 0;
  }
  job.PrefillDone(static_cast<int32_t>(n));
  metrics_.prefill_chunk.Observe(static_cast<double>(n));
  if (planner_.IsCheckpoint(job, job.fed())) {
    ScopedStepPhase phase(phases_, StepPhase::kExports);
    planner_.Checkpoint(job, slot, job.fed());
  }
  job.ScorePrompt(first, n, logits, emitter_, scored_ids_);
  if (job.prefill_remaining() == 0 && !job.samples()) {
    Complete(Extract(job.id()), absl::OkStatus(), FinishReason::kLength);
  }
  return n;
}

void Engine::RunPrefill(absl::Span<const PrefillChunk> chunks) {
  prefill_items_.clear();
  prefill_jobs_.clear();
  size_t sampled = 0;
  int64_t tokens = 0;
  for (const PrefillChunk& chunk : chunks) {
    Job* job = jobs_.at(chunk.id);
    // Looked up at the job's first chunk rather than at admission, so that requests admitted
    // together find what the earlier ones (fed in earlier steps) left. A job that scores its
    // prompt feeds all of it: a cached prefix would skip positions whose logprobs it needs; a
    // forked choice has its leader's state already.
    if (job->prefill_remaining() == static_cast<int64_t>(job->feed().size()) &&
        !job->scores_prompt() && !job->forked()) {
      if (absl::Status s = planner_.Reuse(*job); !s.ok()) {
        FailOnBackendError(chunk.id, s);
        continue;
      }
    }
    // The leader of several choices forks them before the prompt's last token, and so feeds
    // the rest of the prompt first.
    if (job->forks_pending() && job->prefill_remaining() == 1) ForkChoices(*job);
    // A chunk ends at the next prefix checkpoint inside it; the rest goes in the next step.
    int32_t n =
        static_cast<int32_t>(std::min<int64_t>(chunk.tokens, planner_.NextCheckpoint(*job)));
    if (job->forks_pending()) {
      n = static_cast<int32_t>(std::min<int64_t>(n, job->prefill_remaining() - 1));
    }
    if (job->scores_prompt()) {
      if (job->fed() < job->scored_feed()) {
        tokens += ScorePrefill(*job, std::min<int64_t>(n, job->scored_feed() - job->fed()));
        continue;
      }
      // The sampling chunk: a first prompt token with nothing before it is still unscored.
      job->ScorePrompt(job->fed(), 0, {}, emitter_, scored_ids_);
    }
    // The last chunk of a prompt yields the first token, when the job generates any.
    const bool last = n == job->prefill_remaining();
    const bool sample = last && job->samples();
    const uint32_t* allowed = nullptr;
    if (sample && job->constrained()) {
      const absl::Span<uint32_t> mask = prefill_sample_.Mask(sampled);
      if (absl::Status s = job->FillMask(mask); !s.ok()) {
        Complete(Extract(chunk.id), s, FinishReason::kError);  // nothing sampled is unsent
        continue;
      }
      allowed = mask.data();
    }
    prefill_items_.push_back({.slot = *job->session()->slot,
                              .tokens = job->PeekPrefill(n),
                              .sample = sample,
                              .allowed_tokens = allowed});
    prefill_jobs_.push_back(job);
    sampled += sample ? 1 : 0;
    tokens += n;
    metrics_.prefill_chunk.Observe(n);
  }
  metrics_.prefill_step.Observe(static_cast<double>(tokens));
  if (prefill_items_.empty()) return;  // every chunk was scored (ScorePrefill) or failed
  DecodeStep& out = prefill_sample_;
  if (absl::Status status = backend_->PrefillBatch(prefill_items_, out.Output(sampled));
      !status.ok()) {
    // The call may have fed some of its slots: none of them can be trusted (those ScorePrefill
    // fed on their own are).
    for (Job* job : prefill_jobs_) FailOnBackendError(job->id(), status);
    return;
  }
  const absl::Time now = absl::Now();
  finished_.clear();
  size_t row = 0;
  for (size_t i = 0; i < prefill_items_.size(); ++i) {
    Job* job = prefill_jobs_[i];
    job->PrefillDone(static_cast<int32_t>(prefill_items_[i].tokens.size()));
    const int64_t position = static_cast<int64_t>(job->feed().size()) - job->prefill_remaining();
    if (planner_.IsCheckpoint(*job, position)) {
      ScopedStepPhase phase(phases_, StepPhase::kExports);
      planner_.Checkpoint(*job, prefill_items_[i].slot, position);
    }
    if (job->forks_pending() && job->prefill_remaining() == 1) ForkChoices(*job);
    if (!prefill_items_[i].sample) {
      // A job that generates nothing ends with its prompt.
      if (job->prefill_remaining() == 0 && !job->samples()) {
        finished_.emplace_back(job->id(), FinishReason::kLength);
      }
      continue;
    }
    job->set_last_token_step(step_);
    if (absl::Status s = job->Sampled(out.tokens[row]); !s.ok()) {
      ++row;
      FailOnConstraintError(*job, s);
      continue;
    }
    const std::optional<FinishReason> finish =
        EmitSampled(*job, out.tokens[row], out.logprobs[row],
                    absl::MakeConstSpan(out.top_logprobs).subspan(row * kMaxTopLogprobs), now);
    ++row;
    metrics_.time_to_first_token.Observe(absl::ToDoubleSeconds(job->usage().time_to_first_token));
    if (finish.has_value()) finished_.emplace_back(job->id(), *finish);
  }
  CompleteFinished();
}

}  // namespace linserve
