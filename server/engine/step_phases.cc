#include "server/engine/step_phases.h"

#include <chrono>
#include <string>
#include <vector>

namespace linserve {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kInbox: return "inbox";
    case StepPhase::kAdmit: return "admit";
    case StepPhase::kPlan: return "plan";
    case StepPhase::kLaunch: return "launch";
    case StepPhase::kCollect: return "collect";
    case StepPhase::kEmit: return "emit";
    case StepPhase::kPrefill: return "prefill";
    case StepPhase::kExports: return "exports";
    case StepPhase::kOther: return "other";
  }
  return "other";
}

StepPhases::StepPhases(MetricsRegistry& registry) : last_switch_(NowNanos()) {
  const std::vector<double> bounds = ExponentialBuckets(1e-6, 2, 20);  // 1 us .. 0.5 s
  for (int i = 0; i < kStepPhases; ++i) {
    histograms_[i] = &registry.GetHistogram(
        "linserve_engine_phase_seconds",
        "Engine thread time per engine step, by phase (an iteration of the engine loop that "
        "ran a step: its phases add up to its wall time)",
        bounds, {{"phase", std::string(StepPhaseName(static_cast<StepPhase>(i)))}});
  }
}

StepPhase StepPhases::Enter(StepPhase phase) {
  const int64_t now = NowNanos();
  const int leaving = static_cast<int>(current_);
  nanos_[leaving] += now - last_switch_;
  entered_[leaving] = true;
  last_switch_ = now;
  const StepPhase previous = current_;
  current_ = phase;
  return previous;
}

void StepPhases::Flush(bool observe) {
  Enter(current_);  // charge the current phase up to now
  for (int i = 0; i < kStepPhases; ++i) {
    if (observe && entered_[i]) histograms_[i]->Observe(1e-9 * static_cast<double>(nanos_[i]));
    nanos_[i] = 0;
    entered_[i] = false;
  }
}

}  // namespace linserve
