// StepPhases: where the engine thread's time goes, phase by phase, in every loop iteration
// that ran an engine step (docs/server.md: linserve_engine_phase_seconds). The thread is always
// in exactly one phase; entering another charges the time since the last switch to the one it
// leaves, so the phases of an iteration add up to its wall time. Flush observes each phase's
// total of the iteration in its histogram (only phases the iteration entered).
//
// Engine thread only (the histograms themselves are thread-safe).
#ifndef LINSERVE_SERVER_ENGINE_STEP_PHASES_H_
#define LINSERVE_SERVER_ENGINE_STEP_PHASES_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "server/metrics/metrics.h"

namespace linserve {

enum class StepPhase {
  kInbox,    // submissions, cancellations and session operations (Inbox::RunAll)
  kAdmit,    // admission to state slots, StartSampling
  kPlan,     // the scheduler's plan of the step
  kLaunch,   // building the decode rows (constraint masks) and launching them on the backend
  kCollect,  // waiting for the device's decode step (CollectSamples)
  kEmit,     // handing the collected tokens to their jobs: stop matching, detokenizing, sinks
  kPrefill,  // the step's batched prefill of prompt chunks and the first tokens it picks
  kExports,  // starting and landing slot reads: prefix checkpoints and turn boundaries
  kOther,    // the rest: session expiry, lock settling, publishing the gauges
};
inline constexpr int kStepPhases = static_cast<int>(StepPhase::kOther) + 1;

// The `phase` label of each StepPhase.
std::string_view StepPhaseName(StepPhase phase);

class StepPhases {
 public:
  explicit StepPhases(MetricsRegistry& registry);
  StepPhases(const StepPhases&) = delete;
  StepPhases& operator=(const StepPhases&) = delete;

  // Charges the time since the last switch to the current phase and makes `phase` current.
  // Returns the phase it leaves.
  StepPhase Enter(StepPhase phase);
  // Ends the iteration: with `observe`, each phase it entered is observed with its total; the
  // totals then restart from zero (the current phase stays current).
  void Flush(bool observe);

 private:
  std::array<Histogram*, kStepPhases> histograms_{};
  std::array<int64_t, kStepPhases> nanos_{};
  std::array<bool, kStepPhases> entered_{};
  StepPhase current_ = StepPhase::kOther;
  int64_t last_switch_ = 0;
};

// Enters a phase for the scope, then goes back to the phase it left.
class ScopedStepPhase {
 public:
  ScopedStepPhase(StepPhases& phases, StepPhase phase)
      : phases_(phases), previous_(phases.Enter(phase)) {}
  ~ScopedStepPhase() { phases_.Enter(previous_); }
  ScopedStepPhase(const ScopedStepPhase&) = delete;
  ScopedStepPhase& operator=(const ScopedStepPhase&) = delete;

 private:
  StepPhases& phases_;
  const StepPhase previous_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_STEP_PHASES_H_
