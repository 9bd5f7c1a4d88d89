// ConnectionFlags: how linserve-cli and linserve-loadtest reach a server (--target, TLS, bearer
// token, deadline), turned into the client library's ClientOptions.
#ifndef LINSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_
#define LINSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cli/flag_set.h"
#include "client/client.h"

namespace linserve::cli {

struct ConnectionFlags {
  std::string target;
  bool tls = false;
  std::string ca_cert;
  std::string client_cert;
  std::string client_key;
  std::string tls_server_name;
  std::string token;
  std::string token_file;
  absl::Duration timeout = absl::Seconds(60);
  bool retry_unavailable = false;

  explicit ConnectionFlags(std::string default_target) : target(std::move(default_target)) {}

  // Registers --target, --tls, --ca-cert, --client-cert, --client-key, --tls-server-name,
  // --token, --token-file, --timeout and --retry-unavailable.
  void AddTo(FlagSet& flags);

  // Reads the certificate, key and token files. Errors name the flag and the file.
  // --ca-cert, --client-cert, --client-key and --tls-server-name imply --tls.
  absl::StatusOr<ClientOptions> ToClientOptions() const;
};

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_
