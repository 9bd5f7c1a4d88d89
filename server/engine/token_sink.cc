#include "server/engine/token_sink.h"

namespace linserve {

std::string_view ToString(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kConstraintComplete:
      return "constraint_complete";
  }
  return "unknown";
}

}  // namespace linserve
