// PipelinedBackend: makes any Backend asynchronous (Backend::asynchronous() is true), the way a
// device stream does, so that the engine's pipelined loop runs on every host: a launched step
// runs only when it is collected or when any other call arrives first (that call then acts on
// the backend as the steps leave it, as Backend's pipelining contract says), and its outcome is
// reported by CollectSamples. With two steps in flight (launch-ahead) a row's previous_row is
// resolved, when its step runs, to the pick of the step that ran before it.
//
// Not thread-safe, as Backend.
#ifndef LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_
#define LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "model/backend/backend.h"
#include "tests/testing/settling_backend.h"

namespace linserve {

// The engine loops that the engine tests run each test under: over the backend as it is
// (synchronous), made asynchronous with one step in flight (pipelined), and with two
// (launch-ahead).
enum class EngineLoop { kSynchronous, kPipelined, kLaunchAhead };
inline constexpr EngineLoop kEngineLoops[] = {EngineLoop::kSynchronous, EngineLoop::kPipelined,
                                              EngineLoop::kLaunchAhead};
// "Synchronous", "Pipelined", "LaunchAhead": the tests' parameter names.
const char* EngineLoopName(EngineLoop loop);
// `backend` as `loop` runs it: itself, or inside a PipelinedBackend.
std::unique_ptr<Backend> BackendForLoop(std::unique_ptr<Backend> backend, EngineLoop loop);

class PipelinedBackend final : public SettlingBackend {
 public:
  // `steps_in_flight`: max_steps_in_flight(), 1 or 2.
  PipelinedBackend(std::unique_ptr<Backend> inner, int32_t steps_in_flight)
      : SettlingBackend(std::move(inner)), steps_in_flight_(steps_in_flight) {}

  int32_t max_steps_in_flight() const override { return steps_in_flight_; }
  absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                     const SampleOutput& out) override;
  absl::Status CollectSamples() override;

 private:
  void Settle() const override { RunLaunched(); }
  // Runs the launched steps that have not run yet, in launch order; `count`: at most that many
  // of the oldest.
  void RunLaunched(size_t count = 2) const;

  const int32_t steps_in_flight_;
  // A launched step; `outcome` is set once it has run.
  struct Launched {
    std::vector<DecodeItem> batch;
    SampleOutput out;
    std::optional<absl::Status> outcome;
  };
  mutable std::deque<Launched> launched_;  // oldest first
  // The picks of the step that ran last, which a previous_row reads.
  mutable std::vector<TokenId> last_picks_;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_PIPELINED_BACKEND_H_
