// LoadTarget: the RPCs a load test makes, as blocking, thread-safe calls. The gRPC
// implementation talks to a linserve server through the client library; tests substitute a
// simulated server so that the load generator's logic is checked without one.
#ifndef LINSERVE_CLIENT_LOADTEST_LOAD_TARGET_H_
#define LINSERVE_CLIENT_LOADTEST_LOAD_TARGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace linserve::loadtest {

struct GenerateCall {
  // Empty: an ephemeral session.
  std::string session_id;
  std::vector<int32_t> prompt;
  int32_t max_new_tokens = 1;
  float temperature = 1.0f;
  // 0: off.
  int32_t top_k = 0;
  // 1: off.
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = true;
  absl::Duration timeout = absl::Seconds(60);
};

struct GenerateOutcome {
  absl::Status status;
  // From the final message's Usage; 0 when the call failed before it.
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  // The generated token ids, in order.
  std::vector<int32_t> tokens;
};

class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  // Streams one generation, calling on_tokens(n) as each message carrying n >= 1 tokens
  // arrives: in order, one call at a time, possibly on another thread, and every call before
  // Generate returns.
  virtual GenerateOutcome Generate(const GenerateCall& call,
                                   absl::FunctionRef<void(int32_t)> on_tokens) = 0;
  // Session RPCs; every call has a deadline of `timeout`.
  virtual absl::StatusOr<std::string> CreateSession(absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::string> ForkSession(const std::string& id,
                                                  absl::Duration timeout) = 0;
  // Reads the whole snapshot and returns its size in bytes.
  virtual absl::StatusOr<int64_t> ExportSession(const std::string& id, absl::Duration timeout) = 0;
  virtual absl::Status DeleteSession(const std::string& id, absl::Duration timeout) = 0;
  // Cancels every call in flight and fails later ones at once with CANCELLED; the end of a run
  // uses it when in-flight calls outlive the drain timeout.
  virtual void CancelAll() = 0;
};

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_LOAD_TARGET_H_
