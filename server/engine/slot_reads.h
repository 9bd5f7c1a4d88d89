// SlotReads: the engine's asynchronous slot reads (Backend::StartReadSlot), each with what to do
// with the state once it has landed, so that prefix checkpoints and turn boundaries leave the
// step's path: a read starts behind the work launched so far and lands while the device goes on
// (docs/architecture.md §2.2, "Exports off the step's path").
//
// What a read's state is for must not be needed before it lands: the prefix planner lands every
// read before a lookup, the session operations before they run, the engine before it erases
// a session's boundaries (expiry, a backend failure) and at shutdown.
//
// No threads and no locking: the engine thread owns it.
#ifndef LINSERVE_SERVER_ENGINE_SLOT_READS_H_
#define LINSERVE_SERVER_ENGINE_SLOT_READS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "model/backend/backend.h"

namespace linserve {

class SlotReads {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<StateBlob>) &&>;

  // `backend` must outlive the reads.
  explicit SlotReads(Backend& backend) : backend_(backend) {}
  SlotReads(const SlotReads&) = delete;
  SlotReads& operator=(const SlotReads&) = delete;

  // Starts reading `slot` as the work launched so far leaves it; `done` gets the state in a
  // later Land. A start the backend refuses calls `done` with the error at once.
  void Start(SlotId slot, Done done);
  // Calls `done` of the reads that have landed, in start order: with `wait`, of every read
  // started (waiting for the device), else of those done by now.
  void Land(bool wait);
  // Whether a read has started and not landed.
  bool pending() const { return !pending_.empty(); }

 private:
  Backend& backend_;
  std::vector<std::pair<int64_t, Done>> pending_;  // by ticket, in start order
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SLOT_READS_H_
