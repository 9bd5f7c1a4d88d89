// linserve-cli generate: one streamed generation.
#include <iterator>
#include <optional>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/generation.h"

namespace linserve::cli {
namespace {

class GenerateCommand : public Command {
 public:
  absl::string_view name() const override { return "generate"; }
  absl::string_view synopsis() const override { return "generate [flags] [PROMPT...]"; }
  absl::string_view summary() const override {
    return "Stream a generation for a prompt, optionally continuing a session.";
  }
  std::string description() const override {
    return "The words of PROMPT, joined by spaces, are the prompt; with no PROMPT or \"-\" it is "
           "read from stdin (all of it). --token-ids gives the prompt as token ids instead. The "
           "text is written to stdout as it arrives (a model without a tokenizer has none: its "
           "token ids then, space-separated). With --session the generation continues "
           "that session (see `sessions create`); otherwise the server uses an ephemeral one. "
           "--json-schema, --json-object, --regex or --grammar constrain the text (structured "
           "output); with --usage, CONSTRAINT_COMPLETE says the document was completed.";
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("session", &session_, "ID", "Continue this session.");
    flags.Add("token-ids", &token_ids_, "ID[,ID...]",
              "The prompt as token ids instead of text; repeatable.");
    flags.Add("n", &n_, "N",
              "Generate N choices of the prompt (choice i samples with seed + i); N above 1 "
              "needs --format=jsonl (each message names its choice) and, with --session, "
              "--session-choice.");
    flags.Add("session-choice", &session_choice_, "I",
              "With --session and --n above 1: the choice, in [0, N), the session continues "
              "with.");
    flags.Add("prompt-logprobs", &prompt_logprobs_, "N",
              "Score the prompt: each prompt token's log-probability and its N most likely "
              "alternatives, on stderr in text format (\"prompt token ID logprob X top "
              "ID:X...\"), in the messages in jsonl format. With --max-new-tokens=0 nothing "
              "is generated.");
    generation_.AddTo(flags);
  }

  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    absl::StatusOr<bool> jsonl = generation_.Jsonl();
    if (!jsonl.ok()) return jsonl.status();
    v1::GenerateRequest request;
    absl::StatusOr<std::optional<v1::Constraint>> constraint =
        generation_.ReadConstraint(context.io);
    if (!constraint.ok()) return constraint.status();
    if (constraint->has_value()) *request.mutable_constraint() = **constraint;
    if (!token_ids_.empty()) {
      if (!args.empty()) return UsageError("give the prompt as PROMPT or --token-ids, not both");
      request.mutable_token_ids()->mutable_ids()->Assign(token_ids_.begin(), token_ids_.end());
    } else if (args.empty() && context.io.in_is_terminal) {
      return UsageError("no PROMPT: give one as arguments, or pipe it on stdin");
    } else if (args.empty() || (args.size() == 1 && args[0] == "-")) {
      request.set_text(std::string(std::istreambuf_iterator<char>(context.io.in), {}));
    } else {
      request.set_text(absl::StrJoin(args, " "));
    }
    request.set_session_id(session_);
    if (n_) {
      if (*n_ > 1 && !*jsonl) return UsageError("--n above 1 needs --format=jsonl");
      request.set_n(*n_);
    }
    if (session_choice_) request.set_session_choice(*session_choice_);
    if (prompt_logprobs_) request.set_prompt_logprobs(*prompt_logprobs_);
    if (absl::Status s = generation_.Apply(request); !s.ok()) return s;
    // Only a prompt of ids can reach a model without a tokenizer, whose text is always empty.
    bool ids_as_text = false;
    if (!*jsonl && !token_ids_.empty()) {
      absl::StatusOr<v1::GetModelInfoResponse> info = context.client.GetModelInfo();
      if (!info.ok()) return info.status();
      ids_as_text = info->model().tokenizer() == "none";
    }
    absl::StatusOr<GenerationResult> result =
        StreamGeneration(context, request, generation_, *jsonl, ids_as_text);
    if (!result.ok()) return result.status();
    if (!*jsonl && context.io.out_is_terminal) context.io.out << "\n";
    return absl::OkStatus();
  }

 private:
  std::string session_;
  std::vector<int32_t> token_ids_;
  std::optional<int32_t> n_;
  std::optional<int32_t> session_choice_;
  std::optional<int32_t> prompt_logprobs_;
  GenerationFlags generation_;
};

}  // namespace

std::unique_ptr<Command> NewGenerateCommand() { return std::make_unique<GenerateCommand>(); }

}  // namespace linserve::cli
