// linserve-cli chat: a conversation over one server session, line by line.
#include <algorithm>
#include <istream>
#include <optional>
#include <ostream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/commands.h"
#include "client/cli/files.h"
#include "client/cli/generation.h"
#include "client/cli/output.h"

namespace linserve::cli {
namespace {

constexpr char kChatHelp[] =
    "Lines are sent as prompts (wrapped in --prefix and --suffix) and the reply streams back.\n"
    "Commands:\n"
    "  /fork          copy the session (O(1)) and continue on the copy; the original stays\n"
    "  /rewind [N]    undo the last turn exactly, or return to N tokens (a boundary /info\n"
    "                 lists)\n"
    "  /switch ID     continue on another session\n"
    "  /export FILE   write the session's snapshot to FILE\n"
    "  /import FILE   create a session from a snapshot file and continue on it\n"
    "  /reset         continue on a new, empty session\n"
    "  /info          show the current session\n"
    "  /help          this list\n"
    "  /quit          leave (also end of input)\n"
    "A line starting with // is sent as a prompt starting with /.\n";

class ChatCommand : public Command {
 public:
  absl::string_view name() const override { return "chat"; }
  absl::string_view synopsis() const override { return "chat [flags]"; }
  absl::string_view summary() const override {
    return "Interactive multi-turn conversation over one server session.";
  }
  std::string description() const override {
    return "Reads lines from stdin (a terminal or a pipe). Each line, wrapped in --prefix and "
           "--suffix, continues the session and the reply streams to stdout; messages about "
           "the session go to stderr. The chat creates its session unless --session names one; "
           "sessions it creates (also by /fork, /import, /reset) are deleted when it ends "
           "unless --keep. Failed turns and commands are reported and the chat goes on; the "
           "exit status is that of the last failure (0 if none).\n\n" +
           std::string(kChatHelp);
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("session", &session_, "ID",
              "Continue this existing session (never deleted by the chat).");
    flags.Add("keep", &keep_, "Keep the sessions the chat created when it ends.");
    flags.Add("prefix", &prefix_, "TEXT", "Put before each line sent (C escapes understood).");
    flags.Add("suffix", &suffix_, "TEXT", "Put after each line sent (C escapes understood).");
    generation_.AddTo(flags);
  }

  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    if (!args.empty()) return UsageError(absl::StrCat("unexpected argument \"", args[0], "\""));
    absl::StatusOr<bool> jsonl = generation_.Jsonl();
    if (!jsonl.ok()) return jsonl.status();
    std::string error;
    if (!absl::CUnescape(prefix_, &prefix_text_, &error)) {
      return UsageError(absl::StrCat("--prefix=", prefix_, ": ", error));
    }
    if (!absl::CUnescape(suffix_, &suffix_text_, &error)) {
      return UsageError(absl::StrCat("--suffix=", suffix_, ": ", error));
    }
    absl::StatusOr<std::optional<v1::Constraint>> constraint =
        generation_.ReadConstraint(context.io);
    if (!constraint.ok()) return constraint.status();
    constraint_ = *std::move(constraint);
    Io& io = context.io;
    if (!session_.empty()) {
      absl::StatusOr<v1::Session> session = context.client.GetSession(session_);
      if (!session.ok()) return session.status();
      current_ = session_;
      io.err << "chat: on session " << current_ << " (" << session->num_tokens()
             << " tokens); /help for commands\n";
    } else {
      absl::StatusOr<v1::Session> session = context.client.CreateSession();
      if (!session.ok()) return session.status();
      current_ = session->id();
      owned_.push_back(current_);
      io.err << "chat: new session " << current_ << "; /help for commands\n";
    }

    absl::Status last_failure;
    std::string line;
    while (true) {
      if (io.in_is_terminal) io.err << "> " << std::flush;
      if (!std::getline(io.in, line)) break;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      absl::Status status;
      if (line[0] == '/' && !absl::StartsWith(line, "//")) {
        bool quit = false;
        status = RunChatCommand(context, line, quit);
        if (quit) break;
      } else {
        if (absl::StartsWith(line, "//")) line.erase(0, 1);
        status = Turn(context, line, *jsonl);
      }
      if (!status.ok()) {
        Report(io, status);
        last_failure = status;
      }
    }
    if (!keep_) {
      for (const std::string& id : owned_) {
        if (absl::Status s = context.client.DeleteSession(id); !s.ok() && !absl::IsNotFound(s)) {
          Report(io, absl::Status(s.code(), absl::StrCat("deleting session ", id, ": ",
                                                         s.message())));
          last_failure = s;
        }
      }
    } else if (!owned_.empty()) {
      io.err << "chat: kept sessions";
      for (const std::string& id : owned_) io.err << " " << id;
      io.err << "\n";
    }
    return AlreadyReported(last_failure);
  }

 private:
  static void Report(Io& io, const absl::Status& status) {
    if (IsUsageError(status)) {
      io.err << "error: " << status.message() << "\n";
    } else {
      io.err << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
             << "\n";
    }
  }

  absl::Status Turn(CommandContext& context, const std::string& line, bool jsonl) {
    v1::GenerateRequest request;
    request.set_text(absl::StrCat(prefix_text_, line, suffix_text_));
    request.set_session_id(current_);
    if (absl::Status s = generation_.Apply(request); !s.ok()) return s;
    if (constraint_.has_value()) *request.mutable_constraint() = *constraint_;
    absl::StatusOr<GenerationResult> result =
        StreamGeneration(context, request, generation_, jsonl);
    if (!result.ok()) return result.status();
    if (!jsonl && !absl::EndsWith(result->text, "\n")) context.io.out << "\n";
    context.io.out.flush();
    return absl::OkStatus();
  }

  absl::Status RunChatCommand(CommandContext& context, const std::string& line, bool& quit) {
    const std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string& command = words[0];
    Client& client = context.client;
    std::ostream& err = context.io.err;
    auto want = [&](size_t n, absl::string_view usage) -> absl::Status {
      if (words.size() != n + 1) return UsageError(absl::StrCat("usage: ", usage));
      return absl::OkStatus();
    };
    if (command == "/quit" || command == "/exit") {
      quit = true;
      return absl::OkStatus();
    }
    if (command == "/help") {
      err << kChatHelp;
      return absl::OkStatus();
    }
    if (command == "/info") {
      if (absl::Status s = want(0, "/info"); !s.ok()) return s;
      absl::StatusOr<v1::Session> session = client.GetSession(current_);
      if (!session.ok()) return session.status();
      err << FormatSession(*session);
      return absl::OkStatus();
    }
    if (command == "/fork") {
      if (absl::Status s = want(0, "/fork"); !s.ok()) return s;
      absl::StatusOr<v1::Session> fork = client.ForkSession(current_);
      if (!fork.ok()) return fork.status();
      err << "chat: forked " << current_ << " -> " << fork->id() << " ("
          << fork->num_tokens() << " tokens); now on " << fork->id() << "\n";
      current_ = fork->id();
      owned_.push_back(current_);
      return absl::OkStatus();
    }
    if (command == "/rewind") {
      if (words.size() > 2) return UsageError("usage: /rewind [N]");
      absl::StatusOr<v1::Session> session = client.GetSession(current_);
      if (!session.ok()) return session.status();
      int64_t to = -1;
      if (words.size() == 2) {
        if (!absl::SimpleAtoi(words[1], &to) || to < 0) {
          return UsageError(
              absl::StrCat("/rewind N: a number of tokens >= 0, got \"", words[1], "\""));
        }
      } else {
        // The newest boundary before the current length: the start of the last turn.
        for (int64_t boundary : session->boundaries()) {
          if (boundary < session->num_tokens()) to = boundary;
        }
      }
      absl::StatusOr<v1::Session> rewound = client.RewindSession(current_, to);
      if (!rewound.ok()) return rewound.status();
      err << "chat: rewound " << current_ << " from " << session->num_tokens() << " to "
          << rewound->num_tokens() << " tokens\n";
      return absl::OkStatus();
    }
    if (command == "/switch") {
      if (absl::Status s = want(1, "/switch ID"); !s.ok()) return s;
      absl::StatusOr<v1::Session> session = client.GetSession(words[1]);
      if (!session.ok()) return session.status();
      current_ = session->id();
      err << "chat: now on " << current_ << " (" << session->num_tokens() << " tokens)\n";
      return absl::OkStatus();
    }
    if (command == "/export") {
      if (absl::Status s = want(1, "/export FILE"); !s.ok()) return s;
      absl::StatusOr<std::string> snapshot = client.ExportSession(current_);
      if (!snapshot.ok()) return snapshot.status();
      if (absl::Status s = WriteWholeFile(words[1], *snapshot, context.io); !s.ok()) return s;
      err << "chat: exported " << current_ << " to " << words[1] << " (" << snapshot->size()
          << " bytes)\n";
      return absl::OkStatus();
    }
    if (command == "/import") {
      if (absl::Status s = want(1, "/import FILE"); !s.ok()) return s;
      absl::StatusOr<std::string> snapshot = ReadWholeFile(words[1], context.io);
      if (!snapshot.ok()) return snapshot.status();
      absl::StatusOr<v1::Session> session = client.ImportSession(*snapshot);
      if (!session.ok()) return session.status();
      current_ = session->id();
      owned_.push_back(current_);
      err << "chat: imported " << words[1] << " as " << current_ << " ("
          << session->num_tokens() << " tokens); now on it\n";
      return absl::OkStatus();
    }
    if (command == "/reset") {
      if (absl::Status s = want(0, "/reset"); !s.ok()) return s;
      absl::StatusOr<v1::Session> session = client.CreateSession();
      if (!session.ok()) return session.status();
      err << "chat: new session " << session->id() << " (was " << current_ << ")\n";
      current_ = session->id();
      owned_.push_back(current_);
      return absl::OkStatus();
    }
    return UsageError(absl::StrCat("unknown command ", command, " (try /help)"));
  }

  std::string session_;
  bool keep_ = false;
  std::string prefix_;
  std::string suffix_ = "\\n";
  std::string prefix_text_;
  std::string suffix_text_;
  GenerationFlags generation_;
  // The constraint of every turn (--json-schema etc.), read once.
  std::optional<v1::Constraint> constraint_;

  std::string current_;
  // Sessions this chat created, deleted at the end unless --keep.
  std::vector<std::string> owned_;
};

}  // namespace

std::unique_ptr<Command> NewChatCommand() { return std::make_unique<ChatCommand>(); }

}  // namespace linserve::cli
