#include "server/engine/slot_reads.h"

#include <algorithm>

namespace linserve {

void SlotReads::Start(SlotId slot, Done done) {
  absl::StatusOr<int64_t> ticket = backend_.StartReadSlot(slot);
  if (!ticket.ok()) {
    std::move(done)(ticket.status());
    return;
  }
  pending_.emplace_back(*ticket, std::move(done));
}

void SlotReads::Land(bool wait) {
  if (pending_.empty()) return;
  for (Backend::SlotRead& read : backend_.FinishedReads(wait)) {
    const auto it = std::find_if(pending_.begin(), pending_.end(),
                                 [&](const auto& entry) { return entry.first == read.ticket; });
    if (it == pending_.end()) continue;
    Done done = std::move(it->second);
    pending_.erase(it);
    std::move(done)(std::move(read.state));
  }
}

}  // namespace linserve
