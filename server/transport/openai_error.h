// absl::Status mapped to the OpenAI API's error JSON and HTTP statuses.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_ERROR_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace linserve {

struct ApiError {
  int http_status = 500;
  std::string type;
  std::string message;
  // The field at fault, or nullopt (JSON null).
  std::optional<std::string> param;
  std::optional<std::string> code;
};

// INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, ABORTED (a busy session) 409, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE and CANCELLED 503, the rest 500. The first word of a 400's or 404's message, when
// it reads as a field name ("stop[1]: ..."), is the error's "param".
ApiError ToApiError(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}}
std::string ApiErrorJson(const ApiError& error);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_ERROR_H_
