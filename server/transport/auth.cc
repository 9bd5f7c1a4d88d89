#include "server/transport/auth.h"

#include "openssl/crypto.h"

namespace linserve {

BearerTokenAuth::BearerTokenAuth(const std::string& token)
    : expected_(token.empty() ? "" : "Bearer " + token) {}

grpc::Status BearerTokenAuth::Check(const grpc::ServerContextBase& context) const {
  if (expected_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end() && it->second.size() == expected_.size() &&
      CRYPTO_memcmp(it->second.data(), expected_.data(), expected_.size()) == 0) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong bearer token: send metadata "
                      "\"authorization: Bearer <token>\" with the server's --auth_token_file "
                      "contents");
}

}  // namespace linserve
