// GrpcLoadTarget: the LoadTarget that drives a linserve server through the client library.
#ifndef LINSERVE_CLIENT_LOADTEST_GRPC_LOAD_TARGET_H_
#define LINSERVE_CLIENT_LOADTEST_GRPC_LOAD_TARGET_H_

#include <optional>
#include <string>
#include <utility>

#include "client/client.h"
#include "client/loadtest/load_target.h"

namespace linserve::loadtest {

// Thread-safe, as the client is; `client` must outlive it.
class GrpcLoadTarget : public LoadTarget {
 public:
  // Every Generate carries `constraint` (nullopt: none).
  explicit GrpcLoadTarget(Client& client, std::optional<v1::Constraint> constraint = std::nullopt)
      : client_(client), constraint_(std::move(constraint)) {}

  GenerateOutcome Generate(const GenerateCall& call,
                           absl::FunctionRef<void(int32_t)> on_tokens) override;
  absl::StatusOr<std::string> CreateSession(absl::Duration timeout) override;
  absl::StatusOr<std::string> ForkSession(const std::string& id, absl::Duration timeout) override;
  absl::StatusOr<int64_t> ExportSession(const std::string& id, absl::Duration timeout) override;
  absl::Status DeleteSession(const std::string& id, absl::Duration timeout) override;
  void CancelAll() override { client_.CancelAll(); }

 private:
  Client& client_;
  const std::optional<v1::Constraint> constraint_;
};

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_GRPC_LOAD_TARGET_H_
