#include "client/cli/command.h"

#include "absl/strings/cord.h"
#include "client/cli/commands.h"

namespace linserve::cli {
namespace {

constexpr char kUsagePayload[] = "type.googleapis.com/linserve.cli.UsageError";
constexpr char kReportedPayload[] = "type.googleapis.com/linserve.cli.AlreadyReported";

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("usage"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::Status AlreadyReported(absl::Status status) {
  if (!status.ok()) status.SetPayload(kReportedPayload, absl::Cord("reported"));
  return status;
}

bool IsAlreadyReported(const absl::Status& status) {
  return status.GetPayload(kReportedPayload).has_value();
}

std::vector<std::unique_ptr<Command>> AllCommands() {
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(NewGenerateCommand());
  commands.push_back(NewChatCommand());
  commands.push_back(NewSessionsCommand());
  commands.push_back(NewModelCommand());
  commands.push_back(NewHealthCommand());
  commands.push_back(NewTokenizeCommand());
  commands.push_back(NewDetokenizeCommand());
  return commands;
}

}  // namespace linserve::cli
