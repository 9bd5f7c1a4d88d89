// linserve-cli sessions: list, create, get, fork, rewind, delete, export, import.
#include <ostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/files.h"
#include "client/cli/output.h"

namespace linserve::cli {
namespace {

class SessionsCommand : public Command {
 public:
  absl::string_view name() const override { return "sessions"; }
  absl::string_view synopsis() const override {
    return "sessions list|create|get|fork|rewind|delete|export|import [flags] [ARGS...]";
  }
  absl::string_view summary() const override {
    return "Manage server sessions: list, create, get, fork, rewind, delete, export, import.";
  }
  std::string description() const override {
    return "  sessions list                  every session (all pages), ordered by id\n"
           "  sessions create                a new empty session; prints its id\n"
           "  sessions get ID                one session\n"
           "  sessions fork ID [N]           a copy of ID's state (as it stood at N tokens, one\n"
           "                                 of its boundaries); prints the new id\n"
           "  sessions rewind ID N           return ID exactly to N tokens, one of the\n"
           "                                 boundaries `sessions get` lists\n"
           "  sessions delete ID...          delete sessions\n"
           "  sessions export ID FILE        write ID's snapshot to FILE (\"-\": stdout)\n"
           "  sessions import FILE           create a session from a snapshot (\"-\": stdin);\n"
           "                                 prints the new id\n"
           "Snapshots are versioned and checksummed, and only a server running the same model "
           "accepts them. With --format=json, sessions are printed as JSON, one per line.";
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("format", &format_, "text|json", "Output format of sessions.");
    flags.Add("page-size", &page_size_, "N",
              "Sessions per ListSessions call, in [0, 1000] (0: the server's default).");
  }

  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    absl::StatusOr<Format> format = ParseFormat(format_, "format");
    if (!format.ok()) return UsageError(format.status().message());
    json_ = *format == Format::kJson;
    if (args.empty()) return UsageError("sessions: name an action (list, create, ...)");
    const std::string& action = args[0];
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    auto want = [&](size_t n, absl::string_view usage) -> absl::Status {
      if (rest.size() != n) return UsageError(absl::StrCat("usage: sessions ", usage));
      return absl::OkStatus();
    };
    Client& client = context.client;
    std::ostream& out = context.io.out;
    if (action == "list") {
      if (absl::Status s = want(0, "list"); !s.ok()) return s;
      return List(context);
    }
    if (action == "create") {
      if (absl::Status s = want(0, "create"); !s.ok()) return s;
      return PrintId(out, client.CreateSession());
    }
    if (action == "get") {
      if (absl::Status s = want(1, "get ID"); !s.ok()) return s;
      absl::StatusOr<v1::Session> session = client.GetSession(rest[0]);
      if (!session.ok()) return session.status();
      out << (json_ ? ToJson(*session) + "\n" : FormatSession(*session));
      return absl::OkStatus();
    }
    if (action == "fork") {
      if (rest.size() == 2) {
        absl::StatusOr<int64_t> at = ParseNumTokens(rest[1]);
        if (!at.ok()) return at.status();
        return PrintId(out, client.ForkSessionAt(rest[0], *at));
      }
      if (absl::Status s = want(1, "fork ID [N]"); !s.ok()) return s;
      return PrintId(out, client.ForkSession(rest[0]));
    }
    if (action == "rewind") {
      if (absl::Status s = want(2, "rewind ID N"); !s.ok()) return s;
      absl::StatusOr<int64_t> at = ParseNumTokens(rest[1]);
      if (!at.ok()) return at.status();
      absl::StatusOr<v1::Session> session = client.RewindSession(rest[0], *at);
      if (!session.ok()) return session.status();
      out << (json_ ? ToJson(*session) + "\n" : FormatSession(*session));
      return absl::OkStatus();
    }
    if (action == "delete") {
      if (rest.empty()) return UsageError("usage: sessions delete ID...");
      for (const std::string& id : rest) {
        if (absl::Status s = client.DeleteSession(id); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (action == "export") {
      if (absl::Status s = want(2, "export ID FILE"); !s.ok()) return s;
      absl::StatusOr<std::string> snapshot = client.ExportSession(rest[0]);
      if (!snapshot.ok()) return snapshot.status();
      if (absl::Status s = WriteWholeFile(rest[1], *snapshot, context.io); !s.ok()) return s;
      context.io.err << "exported " << rest[0] << ": " << snapshot->size() << " bytes\n";
      return absl::OkStatus();
    }
    if (action == "import") {
      if (absl::Status s = want(1, "import FILE"); !s.ok()) return s;
      absl::StatusOr<std::string> snapshot = ReadWholeFile(rest[0], context.io);
      if (!snapshot.ok()) return snapshot.status();
      return PrintId(out, client.ImportSession(*snapshot));
    }
    return UsageError(absl::StrCat("sessions: unknown action \"", action, "\""));
  }

 private:
  static absl::StatusOr<int64_t> ParseNumTokens(const std::string& text) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 0) {
      return UsageError(absl::StrCat("N: a number of tokens >= 0, got \"", text, "\""));
    }
    return n;
  }

  // Text: the id alone (for scripts: S=$(linserve-cli sessions create)); JSON: the session.
  absl::Status PrintId(std::ostream& out, const absl::StatusOr<v1::Session>& session) {
    if (!session.ok()) return session.status();
    out << (json_ ? ToJson(*session) : session->id()) << "\n";
    return absl::OkStatus();
  }

  absl::Status List(CommandContext& context) {
    std::ostream& out = context.io.out;
    if (!json_) out << SessionTableHeader();
    std::string token;
    do {
      absl::StatusOr<v1::ListSessionsResponse> page =
          context.client.ListSessions(page_size_, token);
      if (!page.ok()) return page.status();
      for (const v1::Session& session : page->sessions()) {
        out << (json_ ? ToJson(session) + "\n" : FormatSessionRow(session));
      }
      token = page->next_page_token();
    } while (!token.empty());
    return absl::OkStatus();
  }

  std::string format_ = "text";
  int32_t page_size_ = 0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> NewSessionsCommand() { return std::make_unique<SessionsCommand>(); }

}  // namespace linserve::cli
