#include "client/cli/connection_flags.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace linserve::cli {
namespace {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot open the file"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("--", flag, "=", path, ": read error"));
  }
  return contents.str();
}

}  // namespace

void ConnectionFlags::AddTo(FlagSet& flags) {
  flags.Add("target", &target, "HOST:PORT", "The linserve server's gRPC address.");
  flags.Add("tls", &tls,
            "Connect with TLS, trusting the system's root certificates unless --ca-cert is "
            "given.");
  flags.Add("ca-cert", &ca_cert, "FILE",
            "PEM CA certificate(s) the server's certificate must be signed by. Implies --tls.");
  flags.Add("client-cert", &client_cert, "FILE",
            "PEM client certificate chain for servers that require mutual TLS; needs "
            "--client-key. Implies --tls.");
  flags.Add("client-key", &client_key, "FILE", "PEM private key of --client-cert.");
  flags.Add("tls-server-name", &tls_server_name, "NAME",
            "The name the server's certificate must carry, when it differs from the host in "
            "--target (e.g. connecting by IP address). Implies --tls.");
  flags.Add("token", &token, "TOKEN",
            "Bearer token sent with every linserve.v1 call (visible in the process list: "
            "prefer --token-file).");
  flags.Add("token-file", &token_file, "FILE",
            "File holding the bearer token (surrounding whitespace ignored).");
  flags.Add("timeout", &timeout, "DURATION",
            "Deadline of each call (e.g. 500ms, 30s, 5m, inf). Streaming generations (generate, "
            "chat) have no deadline unless this flag is given.");
  flags.Add("retry-unavailable", &retry_unavailable,
            "Retry a call that fails UNAVAILABLE before any response (up to 5 attempts, "
            "0.5-4 s apart): what a draining replica or a proxy whose replica is gone answers "
            "(docs/deployment.md).");
}

absl::StatusOr<ClientOptions> ConnectionFlags::ToClientOptions() const {
  ClientOptions options;
  if (target.empty()) return absl::InvalidArgumentError("--target: must not be empty");
  options.target = target;
  options.tls = tls || !ca_cert.empty() || !client_cert.empty() || !client_key.empty() ||
                !tls_server_name.empty();
  options.tls_server_name = tls_server_name;
  if (!ca_cert.empty()) {
    absl::StatusOr<std::string> pem = ReadFlagFile("ca-cert", ca_cert);
    if (!pem.ok()) return pem.status();
    options.tls_root_certs = *std::move(pem);
  }
  if (client_cert.empty() != client_key.empty()) {
    return absl::InvalidArgumentError(
        "--client-cert and --client-key: give both (mutual TLS) or neither");
  }
  if (!client_cert.empty()) {
    absl::StatusOr<std::string> chain = ReadFlagFile("client-cert", client_cert);
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> key = ReadFlagFile("client-key", client_key);
    if (!key.ok()) return key.status();
    options.tls_client_cert_chain = *std::move(chain);
    options.tls_client_key = *std::move(key);
  }
  if (!token.empty() && !token_file.empty()) {
    return absl::InvalidArgumentError("--token and --token-file: give one or the other");
  }
  options.auth_token = token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> text = ReadFlagFile("token-file", token_file);
    if (!text.ok()) return text.status();
    options.auth_token = std::string(absl::StripAsciiWhitespace(*text));
    if (options.auth_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file=", token_file, ": the file is empty"));
    }
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeout=", absl::FormatDuration(timeout), ": must be > 0 (or inf for none)"));
  }
  options.timeout = timeout;
  options.retry_unavailable = retry_unavailable;
  return options;
}

}  // namespace linserve::cli
