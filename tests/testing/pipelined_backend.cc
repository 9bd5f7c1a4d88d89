#include "tests/testing/pipelined_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/slot_pool.h"

namespace linserve {

const char* EngineLoopName(EngineLoop loop) {
  switch (loop) {
    case EngineLoop::kSynchronous: return "Synchronous";
    case EngineLoop::kPipelined: return "Pipelined";
    case EngineLoop::kLaunchAhead: return "LaunchAhead";
  }
  return "?";
}

std::unique_ptr<Backend> BackendForLoop(std::unique_ptr<Backend> backend, EngineLoop loop) {
  switch (loop) {
    case EngineLoop::kSynchronous: return backend;
    case EngineLoop::kPipelined: return std::make_unique<PipelinedBackend>(std::move(backend), 1);
    case EngineLoop::kLaunchAhead: return std::make_unique<PipelinedBackend>(std::move(backend), 2);
  }
  return backend;
}

void PipelinedBackend::RunLaunched(size_t count) const {
  for (size_t i = 0; i < launched_.size() && i < count; ++i) {
    Launched& step = launched_[i];
    if (step.outcome.has_value()) continue;
    for (DecodeItem& item : step.batch) {
      if (item.previous_row < 0) continue;
      item.token = last_picks_[static_cast<size_t>(item.previous_row)];
      item.previous_row = -1;
    }
    step.outcome = inner().DecodeAndSample(step.batch, step.out);
    last_picks_.assign(step.out.tokens.begin(), step.out.tokens.end());
  }
}

absl::Status PipelinedBackend::LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                                     const SampleOutput& out) {
  if (launched_.size() >= static_cast<size_t>(steps_in_flight_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LaunchDecodeAndSample: ", launched_.size(), " steps are in flight; collect one first"));
  }
  const absl::Span<const DecodeItem> in_flight = launched_.empty()
                                                     ? absl::Span<const DecodeItem>()
                                                     : absl::MakeConstSpan(launched_.back().batch);
  if (absl::Status s = CheckPreviousRows(batch, in_flight, "LaunchDecodeAndSample"); !s.ok()) {
    return s;
  }
  launched_.push_back(Launched{.batch = {batch.begin(), batch.end()}, .out = out, .outcome = {}});
  return absl::OkStatus();
}

absl::Status PipelinedBackend::CollectSamples() {
  if (launched_.empty()) {
    return absl::FailedPreconditionError("CollectSamples: no step is in flight");
  }
  RunLaunched(1);
  absl::Status outcome = *launched_.front().outcome;
  launched_.pop_front();
  return outcome;
}

}  // namespace linserve
