#include "server/transport/auth.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "openssl/crypto.h"

namespace linserve {
namespace {

constexpr absl::string_view kScheme = "bearer";

// The credentials of an "authorization" value "<scheme> 1*SP <credentials>" whose scheme is
// Bearer in any letter case (RFC 7235 §2.1, RFC 6750 §2.1), or nullopt.
std::optional<absl::string_view> BearerCredentials(absl::string_view value) {
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) ||
      value[kScheme.size()] != ' ') {
    return std::nullopt;
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return value;
}

}  // namespace

BearerTokenAuth::BearerTokenAuth(const std::string& token) : token_(token) {}

grpc::Status BearerTokenAuth::Check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    const std::optional<absl::string_view> credentials =
        BearerCredentials(absl::string_view(it->second.data(), it->second.size()));
    if (credentials.has_value() && credentials->size() == token_.size() &&
        CRYPTO_memcmp(credentials->data(), token_.data(), token_.size()) == 0) {
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong bearer token: send metadata "
                      "\"authorization: Bearer <token>\" with the server's --auth_token_file "
                      "contents");
}

}  // namespace linserve
