// Command: one subcommand of linserve-cli (generate, chat, sessions, model, health, tokenize,
// detokenize). main.cc owns the connection flags and the client; a command adds its own flags,
// then runs against the client with its positional arguments.
#ifndef LINSERVE_CLIENT_CLI_COMMAND_H_
#define LINSERVE_CLIENT_CLI_COMMAND_H_

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cli/flag_set.h"
#include "client/client.h"

namespace linserve::cli {

// Where a command reads and writes; `*_is_terminal` adapt prompts and trailing newlines.
struct Io {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  bool in_is_terminal = false;
  bool out_is_terminal = false;
};

// What the command's caller needs besides the client.
struct CommandContext {
  Client& client;
  Io& io;
  // Options for streaming generations: the deadline only when --timeout was given.
  CallOptions stream_options;
};

// A usage error: a wrong number or kind of positional arguments. main.cc reports it with the
// command's usage and exit status 64 rather than as a gRPC status.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// `status`, marked as already shown to the user (main.cc then only turns it into the exit
// status). For commands that report failures as they go, such as chat.
absl::Status AlreadyReported(absl::Status status);
bool IsAlreadyReported(const absl::Status& status);

class Command {
 public:
  virtual ~Command() = default;
  virtual absl::string_view name() const = 0;
  // E.g. "generate [flags] [PROMPT...]".
  virtual absl::string_view synopsis() const = 0;
  // One line for the command list.
  virtual absl::string_view summary() const = 0;
  // Paragraphs shown by `help COMMAND` before the flags.
  virtual std::string description() const = 0;
  // Registers the command's own flags, bound to members of the command.
  virtual void AddFlags(FlagSet& flags) = 0;
  // Runs with the positional arguments (after the command name). Errors from the server come
  // back as they are (their code becomes the exit status); argument errors as UsageError.
  virtual absl::Status Run(CommandContext& context, const std::vector<std::string>& args) = 0;
};

// Every command, in the order `help` lists them.
std::vector<std::unique_ptr<Command>> AllCommands();

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_COMMAND_H_
