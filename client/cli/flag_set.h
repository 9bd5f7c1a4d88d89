// FlagSet: the command-line flags of one command of a tool with subcommands (linserve-cli,
// linserve-loadtest). Each command owns its own set, so `--help` lists exactly the flags that
// apply to it, and parsing errors name the flag and what it expects.
//
// Syntax: --name=value, --name value, and for booleans --name, --name=true|false, --noname.
// '_' and '-' are interchangeable in names. "--" ends the flags; everything after it is
// positional.
#ifndef LINSERVE_CLIENT_CLI_FLAG_SET_H_
#define LINSERVE_CLIENT_CLI_FLAG_SET_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace linserve::cli {

class FlagSet {
 public:
  // Each Add registers --name bound to *value (which must outlive the set); `help` is one
  // sentence or more, `value_name` the placeholder shown in the usage (e.g. "FILE"). The
  // current *value is shown as the default unless it is empty. An optional<> stays nullopt
  // unless the flag is given; a vector<> flag may be repeated and also takes comma-separated
  // lists.
  void Add(absl::string_view name, std::string* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, bool* value, absl::string_view help);
  void Add(absl::string_view name, int32_t* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, int64_t* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, double* value, absl::string_view value_name,
           absl::string_view help);
  // Durations as absl::ParseDuration reads them: "250ms", "30s", "1.5m", "inf".
  void Add(absl::string_view name, absl::Duration* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, std::optional<int32_t>* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, std::optional<uint64_t>* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, std::optional<float>* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, std::vector<std::string>* value, absl::string_view value_name,
           absl::string_view help);
  void Add(absl::string_view name, std::vector<int32_t>* value, absl::string_view value_name,
           absl::string_view help);

  // Parses `args` (no program or command name), assigning the flags it names, and returns the
  // positional arguments in order. With stop_at_positional, parsing ends at the first
  // positional argument and it and everything after it are returned unparsed (global flags
  // before a subcommand). Errors are INVALID_ARGUMENT naming the flag.
  absl::StatusOr<std::vector<std::string>> Parse(absl::Span<const std::string> args,
                                                 bool stop_at_positional = false);

  // Whether the flag was given on the command line.
  bool WasSet(absl::string_view name) const;

  // One block per flag, in registration order: "  --name=VALUE" then the indented help.
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for booleans
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    // Assigns the flag from its text; the error says what the value should be.
    std::function<absl::Status(absl::string_view)> assign;
  };
  Flag& Register(absl::string_view name, absl::string_view value_name, absl::string_view help,
                 std::string default_text);
  Flag* Find(absl::string_view name);
  const Flag* Find(absl::string_view name) const;

  std::vector<Flag> flags_;
};

// Word-wraps `text` into lines of at most `width` columns (longer words stand alone), each
// starting with `indent` spaces and ending in a newline. Lines of `text` that start with a
// space are kept as they are (preformatted); blank lines separate paragraphs.
std::string WrapText(absl::string_view text, int indent, int width);

// Splits "1,2, 3" into integers; errors name `what`.
absl::StatusOr<std::vector<int32_t>> ParseIntList(absl::string_view text, absl::string_view what);

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_FLAG_SET_H_
