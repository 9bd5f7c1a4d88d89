#include "tests/testing/device_clock_backend.h"

#include <sys/prctl.h>
#include <time.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/slot_pool.h"

namespace linserve {
namespace {

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Sleeps until CLOCK_MONOTONIC reads `nanos` (the thread's timer slack is 1 ns: see
// DeviceLoop).
void SleepUntil(int64_t nanos) {
  const timespec until{.tv_sec = nanos / 1'000'000'000, .tv_nsec = nanos % 1'000'000'000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) != 0) {
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceClockBackend>> DeviceClockBackend::Create(
    std::unique_ptr<Backend> inner, absl::Duration step_time, int32_t steps_in_flight) {
  if (inner == nullptr) return absl::InvalidArgumentError("DeviceClockBackend needs a backend");
  if (step_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step_time = ", absl::FormatDuration(step_time), " is negative"));
  }
  if (steps_in_flight != 1 && steps_in_flight != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps_in_flight = ", steps_in_flight, " is neither 1 nor 2"));
  }
  return std::unique_ptr<DeviceClockBackend>(
      new DeviceClockBackend(std::move(inner), step_time, steps_in_flight));
}

DeviceClockBackend::DeviceClockBackend(std::unique_ptr<Backend> inner, absl::Duration step_time,
                                       int32_t steps_in_flight)
    : SettlingBackend(std::move(inner)),
      step_nanos_(absl::ToInt64Nanoseconds(step_time)),
      steps_in_flight_(steps_in_flight),
      free_slots_(SettlingBackend::free_slots()),
      thread_([this] { DeviceLoop(); }) {}

DeviceClockBackend::~DeviceClockBackend() {
  Settle();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

bool DeviceClockBackend::IdleLocked() const {
  for (const Step& step : steps_) {
    if (!step.done) return false;
  }
  return true;
}

bool DeviceClockBackend::HasWorkLocked() const { return stop_ || !IdleLocked(); }

void DeviceClockBackend::Settle() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &DeviceClockBackend::IdleLocked));
}

void DeviceClockBackend::DeviceLoop() {
  // Wake-ups on time: the default 50 us of timer slack would lengthen every step.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (true) {
    Step* step = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &DeviceClockBackend::HasWorkLocked));
      for (Step& s : steps_) {
        if (!s.done) {
          step = &s;
          break;
        }
      }
      if (step == nullptr) return;  // stopping, nothing left
    }
    // The host does not touch a step's rows or output, nor the inner backend, until it is done.
    const int64_t start = MonotonicNanos();
    resolved_.assign(step->batch.begin(), step->batch.end());
    for (DecodeItem& item : resolved_) {
      if (item.previous_row < 0) continue;
      item.token = last_picks_[static_cast<size_t>(item.previous_row)];
      item.previous_row = -1;
    }
    absl::Status outcome = inner().DecodeAndSample(resolved_, step->out);
    last_picks_.assign(step->out.tokens.begin(), step->out.tokens.end());
    SleepUntil(start + step_nanos_);
    if (outcome.ok()) {
      counters_.CountStep(static_cast<int32_t>(resolved_.size()), MonotonicNanos() - start);
    }
    absl::MutexLock lock(&mu_);
    step->outcome = std::move(outcome);
    step->done = true;
  }
}

absl::Status DeviceClockBackend::LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                                       const SampleOutput& out) {
  counters_.NoteCaller();
  absl::MutexLock lock(&mu_);
  if (steps_.size() >= static_cast<size_t>(steps_in_flight_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LaunchDecodeAndSample: ", steps_.size(), " steps are in flight; collect one first"));
  }
  const absl::Span<const DecodeItem> in_flight =
      steps_.empty() ? absl::Span<const DecodeItem>() : absl::MakeConstSpan(steps_.back().batch);
  if (absl::Status s = CheckPreviousRows(batch, in_flight, "LaunchDecodeAndSample"); !s.ok()) {
    return s;
  }
  steps_.push_back(
      Step{.batch = {batch.begin(), batch.end()}, .out = out, .done = false, .outcome = {}});
  return absl::OkStatus();
}

absl::Status DeviceClockBackend::CollectSamples() {
  absl::MutexLock lock(&mu_);
  if (steps_.empty()) return absl::FailedPreconditionError("CollectSamples: no step is in flight");
  mu_.Await(absl::Condition(+[](std::deque<Step>* steps) { return steps->front().done; },
                            &steps_));
  absl::Status outcome = std::move(steps_.front().outcome);
  steps_.pop_front();
  return outcome;
}

absl::StatusOr<SlotId> DeviceClockBackend::AllocateSlot() {
  absl::StatusOr<SlotId> slot = SettlingBackend::AllocateSlot();
  free_slots_ = SettlingBackend::free_slots();
  return slot;
}

void DeviceClockBackend::FreeSlot(SlotId slot) {
  SettlingBackend::FreeSlot(slot);
  free_slots_ = SettlingBackend::free_slots();
}

}  // namespace linserve
