#include "server/transport/openai_error.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace linserve {

using nlohmann::json;

ApiError ToApiError(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case absl::StatusCode::kAborted:
      e.http_status = 409;
      e.type = "conflict_error";
      e.code = "session_busy";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  // The first word of an invalid request's message names the field ("stop[1]: ...").
  if (e.http_status == 400 || e.http_status == 404) {
    const size_t colon = e.message.find(": ");
    if (colon != std::string::npos) {
      const absl::string_view field = absl::string_view(e.message).substr(0, colon);
      const bool is_field = std::all_of(field.begin(), field.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
      });
      if (is_field) e.param = std::string(field);
    }
  }
  if (e.http_status == 404 && e.param == "model") e.code = "model_not_found";
  return e;
}

std::string ApiErrorJson(const ApiError& error) {
  json e = {
      {"message", error.message}, {"type", error.type}, {"param", nullptr}, {"code", nullptr}};
  if (error.param.has_value()) e["param"] = *error.param;
  if (error.code.has_value()) e["code"] = *error.code;
  return json{{"error", std::move(e)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace linserve
