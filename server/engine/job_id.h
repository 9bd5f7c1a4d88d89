// JobId: names one submitted generation inside the engine (for Cancel and the scheduler).
#ifndef LINSERVE_SERVER_ENGINE_JOB_ID_H_
#define LINSERVE_SERVER_ENGINE_JOB_ID_H_

#include <compare>
#include <cstdint>
#include <utility>

namespace linserve {

struct JobId {
  uint64_t value = 0;

  friend auto operator<=>(const JobId&, const JobId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const JobId& id) {
    return H::combine(std::move(h), id.value);
  }
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_JOB_ID_H_
