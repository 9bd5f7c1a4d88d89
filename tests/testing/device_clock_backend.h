// DeviceClockBackend: a CPU stand-in for a GPU's timing (issue 38), so that the engine's
// overlap of host and device work can be developed, tested and benchmarked on machines without
// one. It keeps the whole Backend contract by passing every call to an inner backend (in the
// benchmark an InstantBackend, in tests any backend), but runs decode steps the way a device
// stream does: LaunchDecodeAndSample queues the step and returns at once; a device thread of its
// own runs the queued steps in launch order, each completing `step_time` after it starts (when
// it is launched, or when the step before it completes, whichever is later: the inner
// backend's own time counts inside it); CollectSamples waits for the oldest step. With two
// steps in flight (launch-ahead) a row's previous_row is resolved on the device thread to the
// pick of the step that ran before it, which the host has not seen.
//
// Every other call first waits until no step is queued or running (SettlingBackend: as a call
// that reads or writes a slot waits for the device) and then calls the inner backend on the
// caller's thread, so the inner backend is only ever used by one thread at a time. Prefill
// therefore costs the inner backend's time only (the stand-in times decode steps).
//
// Not thread-safe, as Backend, except counters(), which any thread may read.
#ifndef LINSERVE_TESTS_TESTING_DEVICE_CLOCK_BACKEND_H_
#define LINSERVE_TESTS_TESTING_DEVICE_CLOCK_BACKEND_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tests/testing/step_counters.h"
#include "model/backend/backend.h"
#include "tests/testing/settling_backend.h"

namespace linserve {

class DeviceClockBackend final : public SettlingBackend {
 public:
  // `step_time` >= 0; `steps_in_flight`: max_steps_in_flight(), 1 or 2.
  static absl::StatusOr<std::unique_ptr<DeviceClockBackend>> Create(
      std::unique_ptr<Backend> inner, absl::Duration step_time, int32_t steps_in_flight);
  // Waits for the steps in flight, then stops the device thread.
  ~DeviceClockBackend() override;

  // Kept here, so that reading it (every engine iteration) needs no wait for the device.
  int32_t free_slots() const override { return free_slots_; }
  absl::StatusOr<SlotId> AllocateSlot() override;
  void FreeSlot(SlotId slot) override;

  int32_t max_steps_in_flight() const override { return steps_in_flight_; }
  absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                     const SampleOutput& out) override;
  absl::Status CollectSamples() override;

  // The decode steps the device thread completed: their rows, the device's busy time (from a
  // step's start to its completion) and the CPU clock of the thread that launched the first
  // (the engine thread).
  const StepCounters& counters() const { return counters_; }

 private:
  struct Step {
    std::vector<DecodeItem> batch;
    SampleOutput out;
    bool done = false;
    absl::Status outcome;
  };

  DeviceClockBackend(std::unique_ptr<Backend> inner, absl::Duration step_time,
                     int32_t steps_in_flight);
  void DeviceLoop();
  // Blocks until every launched step has run (collected or not).
  void Settle() const override;
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t step_nanos_;
  const int32_t steps_in_flight_;
  int32_t free_slots_;  // the inner backend's

  mutable absl::Mutex mu_;
  // Launched and not collected, oldest first; the ones done come first. A deque keeps each
  // step where it is while the device thread runs it.
  std::deque<Step> steps_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Device thread only: the picks of the step it ran last, which a previous_row reads.
  std::vector<TokenId> last_picks_;
  std::vector<DecodeItem> resolved_;  // device thread only: a step's rows, previous rows fed
  StepCounters counters_;
  std::thread thread_;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_DEVICE_CLOCK_BACKEND_H_
