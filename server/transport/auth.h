// Authentication of linserve.v1 RPCs and the principal each call acts for.
//
// A principal names the tenant that owns sessions (server/sessions/session_store.h): a call only
// ever reaches its own tenant's sessions. It is, in this order:
//   - the tenant whose bearer token the call sends ("authorization: Bearer <token>" metadata),
//     from the tokens file (tenant names, ParseTenantTokens) or the single token of
//     --auth_token_file (the default tenant, named "");
//   - with mutual TLS, the subject of the client's verified certificate, as RFC 2253 text
//     ("CN=linserve test client"); tenant names cannot contain '=', so the two never collide;
//   - without either, "" (one implicit tenant).
// grpc.health.v1 and server reflection are exempt from all of it: load balancers and tools probe
// them without credentials, and they reveal nothing but the public schema.
#ifndef LINSERVE_SERVER_TRANSPORT_AUTH_H_
#define LINSERVE_SERVER_TRANSPORT_AUTH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace linserve {

// Longest tenant name in a tokens file.
inline constexpr size_t kMaxTenantNameBytes = 128;

struct TenantToken {
  // 1..kMaxTenantNameBytes of [A-Za-z0-9._-]; "" only for --auth_token_file's token.
  std::string tenant;
  // The bearer token: printable ASCII without spaces.
  std::string token;
};

// Parses a tokens file: one "<tenant> <token>" per line, separated by spaces or tabs; blank
// lines and lines starting with '#' are ignored. A tenant may have several tokens (rotation);
// a token may appear only once. INVALID_ARGUMENT naming `source` (the file) and the line, never
// quoting a token; also when no line holds a token.
absl::StatusOr<std::vector<TenantToken>> ParseTenantTokens(absl::string_view contents,
                                                           absl::string_view source);
// Reads and parses the tokens file at `path` (errors name the path).
absl::StatusOr<std::vector<TenantToken>> ReadTenantTokensFile(const std::string& path);

// Who may call, from the server's flags (main.cc builds the one Authenticator both front ends
// share).
struct AuthOptions {
  // A bearer token of the default tenant (""): the only tenant when tenant_tokens is empty.
  // "" = none. Default: "".
  std::string auth_token;
  // Bearer tokens of named tenants (ReadTenantTokensFile). With these or auth_token, every
  // call must send "authorization: Bearer <token>" (under mutual TLS, or else its certificate
  // names it) and reaches only its tenant's sessions. Every token, auth_token included, must be
  // distinct. Default: none.
  std::vector<TenantToken> tenant_tokens;
  // Callers without a token are named by their client certificate's subject: set it exactly
  // when the gRPC server requires verified client certificates (mutual TLS). Default: false.
  bool certificate_principals = false;
};

class Authenticator {
 public:
  // INVALID_ARGUMENT when a tenant token lacks its tenant or token, or a token appears twice
  // (never quoting it).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(const AuthOptions& options);
  // `tokens`: every accepted bearer token and its tenant (empty: no token is checked); tokens
  // must be distinct. `certificate_principals`: callers without a token are named by their
  // client certificate's subject (set it exactly when the server requires verified client
  // certificates, i.e. mutual TLS).
  Authenticator(const std::vector<TenantToken>& tokens, bool certificate_principals);

  bool tokens_required() const { return !tokens_.empty(); }
  // Distinct tenants with a token, the default tenant included. Tenants named by a client
  // certificate alone are not known in advance and not counted.
  int32_t tenant_count() const;

  // The principal of the call (see the file comment). UNAUTHENTICATED, saying which metadata is
  // expected, when tokens are configured and the call sends a token that matches none, or sends
  // none and has no certificate subject to fall back on. The scheme is matched in any letter
  // case ("Bearer", "bearer", ...); tokens are compared in constant time (SHA-256 digests, every
  // one compared), so timing reveals neither a token nor which tenant matched.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;
  // The same for an HTTP request: `authorization` is its Authorization header, nullopt when it
  // has none. HTTP carries no client certificate, so only tokens name a tenant there; a server
  // that names callers by certificate alone refuses every HTTP call.
  absl::StatusOr<std::string> AuthenticateHttp(
      std::optional<absl::string_view> authorization) const;

 private:
  using Digest = std::array<uint8_t, 32>;
  // The tenant of an "authorization" value (UNAUTHENTICATED when it matches no token).
  absl::StatusOr<std::string> Match(absl::string_view authorization) const;
  struct Entry {
    Digest digest;
    std::string tenant;
  };
  std::vector<Entry> tokens_;
  const bool certificate_principals_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_AUTH_H_
