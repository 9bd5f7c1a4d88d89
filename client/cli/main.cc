// linserve-cli: the command-line client of the linserve server. main() parses the connection
// flags and the command name, then hands over to the command (client/cli/*_command.cc).
//
// Exit status: 0 on success; 64 for a usage error (unknown flag or command, wrong arguments);
// otherwise the gRPC status code of the failure (1-16, e.g. 5 NOT_FOUND, 14 UNAVAILABLE), whose
// name and message are printed on stderr.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/command.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_set.h"
#include "client/client.h"

namespace linserve::cli {
namespace {

constexpr int kUsageExit = 64;
constexpr char kDefaultTarget[] = "localhost:50051";

std::string ConnectionUsage() {
  ConnectionFlags connection(kDefaultTarget);
  FlagSet flags;
  connection.AddTo(flags);
  return flags.Usage();
}

std::string GeneralUsage(const std::vector<std::unique_ptr<Command>>& commands) {
  std::string out =
      "linserve-cli: command-line client of the linserve inference server.\n\n"
      "Usage: linserve-cli [connection flags] COMMAND [flags] [ARGS...]\n\nCommands:\n";
  for (const auto& command : commands) {
    absl::StrAppendFormat(&out, "  %-12s %s\n", command->name(), command->summary());
  }
  absl::StrAppendFormat(&out, "  %-12s %s\n", "help", "help [COMMAND]: this text, or a command's");
  absl::StrAppend(&out,
                  "\nConnection flags (before or after the command):\n", ConnectionUsage(),
                  "  --help\n      Show help (also: linserve-cli help COMMAND).\n\n"
                  "Exit status: 0 on success; 64 for a usage error; otherwise the gRPC status "
                  "code of the\nfailure (e.g. 5 NOT_FOUND, 14 UNAVAILABLE), whose name and "
                  "message are printed on stderr.\n");
  return out;
}

std::string CommandUsage(Command& command) {
  FlagSet flags;
  command.AddFlags(flags);
  std::string out = absl::StrCat("Usage: linserve-cli ", command.synopsis(), "\n\n",
                                 command.summary(), "\n\n", WrapText(command.description(), 0, 92));
  const std::string own = flags.Usage();
  if (!own.empty()) absl::StrAppend(&out, "\nFlags:\n", own);
  absl::StrAppend(&out, "\nConnection flags:\n", ConnectionUsage());
  return out;
}

int Fail(const absl::Status& status) {
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return static_cast<int>(status.code());
}

int UsageFail(absl::string_view message, absl::string_view help_hint) {
  std::cerr << "error: " << message << "\n" << help_hint << "\n";
  return kUsageExit;
}

int Main(int argc, char** argv) {
  std::vector<std::unique_ptr<Command>> commands = AllCommands();
  const std::vector<std::string> args(argv + 1, argv + argc);
  ConnectionFlags connection(kDefaultTarget);
  bool help = false;

  FlagSet global;
  connection.AddTo(global);
  global.Add("help", &help, "Show help.");
  absl::StatusOr<std::vector<std::string>> rest = global.Parse(args, /*stop_at_positional=*/true);
  if (!rest.ok()) return UsageFail(rest.status().message(), "run linserve-cli --help");
  if (rest->empty()) {
    if (help) {
      std::cout << GeneralUsage(commands);
      return 0;
    }
    std::cerr << GeneralUsage(commands);
    return kUsageExit;
  }
  const std::string name = (*rest)[0];
  auto find = [&](absl::string_view wanted) -> Command* {
    for (auto& command : commands) {
      if (command->name() == wanted) return command.get();
    }
    return nullptr;
  };
  if (name == "help") {
    if (rest->size() == 1) {
      std::cout << GeneralUsage(commands);
      return 0;
    }
    Command* command = find((*rest)[1]);
    if (command == nullptr) {
      return UsageFail(absl::StrCat("unknown command \"", (*rest)[1], "\""),
                       "run linserve-cli help");
    }
    std::cout << CommandUsage(*command);
    return 0;
  }
  Command* command = find(name);
  if (command == nullptr) {
    return UsageFail(absl::StrCat("unknown command \"", name, "\""), "run linserve-cli help");
  }
  const std::string hint = absl::StrCat("run linserve-cli help ", name);

  FlagSet flags;
  connection.AddTo(flags);
  flags.Add("help", &help, "Show help.");
  command->AddFlags(flags);
  absl::StatusOr<std::vector<std::string>> positional =
      flags.Parse(std::vector<std::string>(rest->begin() + 1, rest->end()));
  if (!positional.ok()) return UsageFail(positional.status().message(), hint);
  if (help) {
    std::cout << CommandUsage(*command);
    return 0;
  }

  absl::StatusOr<ClientOptions> options = connection.ToClientOptions();
  if (!options.ok()) {
    if (options.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageFail(options.status().message(), hint);
    }
    return Fail(options.status());
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(*options);
  if (!client.ok()) return Fail(client.status());

  Io io{std::cin, std::cout, std::cerr, isatty(0) == 1, isatty(1) == 1};
  CommandContext context{**client, io, {}};
  context.stream_options.timeout =
      flags.WasSet("timeout") || global.WasSet("timeout") ? connection.timeout
                                                          : absl::InfiniteDuration();
  const absl::Status status = command->Run(context, *positional);
  std::cout.flush();
  if (status.ok()) return 0;
  if (IsAlreadyReported(status)) {
    return IsUsageError(status) ? kUsageExit : static_cast<int>(status.code());
  }
  if (IsUsageError(status)) return UsageFail(status.message(), hint);
  return Fail(status);
}

}  // namespace
}  // namespace linserve::cli

int main(int argc, char** argv) { return linserve::cli::Main(argc, argv); }
