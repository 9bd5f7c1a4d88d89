#include "server/transport/auth.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/grpc_security_constants.h"
#include "openssl/crypto.h"
#include "openssl/sha.h"
#include "server/sessions/session_record.h"

namespace linserve {
namespace {

constexpr absl::string_view kScheme = "bearer";
constexpr absl::string_view kMissingToken =
    "missing bearer token: send \"authorization: Bearer <token>\" with a token of the server's "
    "--auth_tokens_file or --auth_token_file";

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

std::array<uint8_t, 32> Sha256(absl::string_view bytes) {
  std::array<uint8_t, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return digest;
}

bool IsTenantName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTenantNameBytes) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool IsToken(absl::string_view token) {
  for (char c : token) {
    if (c <= ' ' || c >= 127) return false;
  }
  return !token.empty();
}

absl::Status LineError(absl::string_view source, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("\"", source, "\" line ", line, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<TenantToken>> ParseTenantTokens(absl::string_view contents,
                                                           absl::string_view source) {
  std::vector<TenantToken> out;
  absl::flat_hash_map<std::string, int> line_of_token;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    // Fields are never quoted in errors: a misplaced one may be a secret.
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return LineError(source, line_number,
                       absl::StrCat("expected \"<tenant> <token>\" (2 fields), found ",
                                    fields.size(), " fields"));
    }
    if (!IsTenantName(fields[0])) {
      return LineError(source, line_number,
                       absl::StrCat("the tenant name (first field) must be 1 to ",
                                    kMaxTenantNameBytes,
                                    " characters of A-Z a-z 0-9 . _ -"));
    }
    if (!IsToken(fields[1])) {
      return LineError(source, line_number,
                       "the token (second field) must be printable ASCII without spaces");
    }
    auto [it, inserted] = line_of_token.try_emplace(std::string(fields[1]), line_number);
    if (!inserted) {
      return LineError(source, line_number,
                       absl::StrCat("the same token as line ", it->second,
                                    "; every token must name one tenant"));
    }
    out.push_back(TenantToken{std::string(fields[0]), std::string(fields[1])});
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", source, "\" holds no \"<tenant> <token>\" line (blank and # lines are ignored)"));
  }
  return out;
}

absl::StatusOr<std::vector<TenantToken>> ReadTenantTokensFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read \"", path, "\""));
  return ParseTenantTokens(out.str(), path);
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(
    const AuthOptions& options) {
  for (const TenantToken& t : options.tenant_tokens) {
    if (t.tenant.empty() || t.token.empty()) {
      return absl::InvalidArgumentError(
          "tenant_tokens: every entry needs a tenant name and a token");
    }
  }
  std::vector<TenantToken> tokens = options.tenant_tokens;
  if (!options.auth_token.empty()) tokens.push_back(TenantToken{"", options.auth_token});
  absl::flat_hash_set<absl::string_view> distinct;
  for (const TenantToken& t : tokens) {
    if (!distinct.insert(t.token).second) {
      return absl::InvalidArgumentError(
          "auth_token (--auth_token_file) and tenant_tokens (--auth_tokens_file): a token "
          "appears twice; every token names one tenant");
    }
  }
  return std::make_unique<Authenticator>(tokens, options.certificate_principals);
}

Authenticator::Authenticator(const std::vector<TenantToken>& tokens,
                             bool certificate_principals)
    : certificate_principals_(certificate_principals) {
  tokens_.reserve(tokens.size());
  for (const TenantToken& t : tokens) tokens_.push_back(Entry{Sha256(t.token), t.tenant});
}

int32_t Authenticator::tenant_count() const {
  absl::flat_hash_set<absl::string_view> tenants;
  for (const Entry& entry : tokens_) tenants.insert(entry.tenant);
  return static_cast<int32_t>(tenants.size());
}

absl::StatusOr<std::string> Authenticator::Match(absl::string_view authorization) const {
  const std::optional<absl::string_view> credentials = BearerCredentials(authorization);
  if (credentials.has_value()) {
    // Every digest is compared, whichever matches: the time taken is the same for every token
    // presented.
    const Digest presented = Sha256(*credentials);
    const Entry* match = nullptr;
    for (const Entry& entry : tokens_) {
      if (CRYPTO_memcmp(presented.data(), entry.digest.data(), presented.size()) == 0) {
        match = &entry;
      }
    }
    if (match != nullptr) return match->tenant;
  }
  return absl::UnauthenticatedError(
      "wrong bearer token: send \"authorization: Bearer <token>\" with a token of the "
      "server's --auth_tokens_file or --auth_token_file");
}

absl::StatusOr<std::string> Authenticator::Authenticate(
    const grpc::ServerContextBase& context) const {
  if (!tokens_.empty()) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    if (it != metadata.end()) {
      return Match(absl::string_view(it->second.data(), it->second.size()));
    }
  }
  if (certificate_principals_) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    const std::vector<grpc::string_ref> subjects =
        auth == nullptr ? std::vector<grpc::string_ref>()
                        : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
    if (subjects.size() == 1 && !subjects[0].empty() && subjects[0].size() <= kMaxTenantBytes) {
      return std::string(subjects[0].data(), subjects[0].size());
    }
    return absl::UnauthenticatedError(absl::StrCat(
        "the client certificate has no subject of 1 to ", kMaxTenantBytes,
        " bytes to name the caller", tokens_.empty() ? "" : ", and no bearer token was sent"));
  }
  if (tokens_.empty()) return std::string();
  return absl::UnauthenticatedError(kMissingToken);
}

absl::StatusOr<std::string> Authenticator::AuthenticateHttp(
    std::optional<absl::string_view> authorization) const {
  if (!tokens_.empty()) {
    if (authorization.has_value()) return Match(*authorization);
    return absl::UnauthenticatedError(kMissingToken);
  }
  // Callers named only by client certificates (mutual TLS on gRPC) cannot be named over HTTP,
  // which carries none: letting them in as the implicit tenant would bypass that check.
  if (certificate_principals_) {
    return absl::UnauthenticatedError(
        "this server names callers by TLS client certificate, which its HTTP API does not "
        "carry: use gRPC, or start the server with --auth_tokens_file or --auth_token_file");
  }
  return std::string();
}

}  // namespace linserve
