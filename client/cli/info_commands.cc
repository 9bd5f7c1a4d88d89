// linserve-cli model, health, tokenize and detokenize.
#include <iterator>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/output.h"

namespace linserve::cli {
namespace {

absl::Status NoArguments(const std::vector<std::string>& args) {
  if (args.empty()) return absl::OkStatus();
  return UsageError(absl::StrCat("unexpected argument \"", args[0], "\""));
}

class ModelCommand : public Command {
 public:
  absl::string_view name() const override { return "model"; }
  absl::string_view synopsis() const override { return "model [flags]"; }
  absl::string_view summary() const override {
    return "Show the model, the server's limits and its load.";
  }
  std::string description() const override {
    return "Architecture, parameter count, recurrent state bytes per session (the same at "
           "every length), slot capacity, request limits and current load.";
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("format", &format_, "text|json", "Output format.");
  }
  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    if (absl::Status s = NoArguments(args); !s.ok()) return s;
    absl::StatusOr<Format> format = ParseFormat(format_, "format");
    if (!format.ok()) return UsageError(format.status().message());
    absl::StatusOr<v1::GetModelInfoResponse> info = context.client.GetModelInfo();
    if (!info.ok()) return info.status();
    context.io.out << (*format == Format::kJson ? ToJson(*info) + "\n" : FormatModelInfo(*info));
    return absl::OkStatus();
  }

 private:
  std::string format_ = "text";
};

class HealthCommand : public Command {
 public:
  absl::string_view name() const override { return "health"; }
  absl::string_view synopsis() const override { return "health [flags]"; }
  absl::string_view summary() const override {
    return "grpc.health.v1 check: exit 0 when the server is SERVING.";
  }
  std::string description() const override {
    return "Prints the serving status. Any status but SERVING (e.g. NOT_SERVING while the "
           "server drains) fails with UNAVAILABLE. Needs no bearer token.";
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("service", &service_, "NAME",
              "The service to check: \"\" for the whole server, or linserve.v1.LinServe.");
  }
  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    if (absl::Status s = NoArguments(args); !s.ok()) return s;
    absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> status =
        context.client.CheckHealth(service_);
    if (!status.ok()) return status.status();
    const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status);
    if (*status != grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::UnavailableError(absl::StrCat("the server reports ", name));
    }
    context.io.out << name << "\n";
    return absl::OkStatus();
  }

 private:
  std::string service_;
};

class TokenizeCommand : public Command {
 public:
  absl::string_view name() const override { return "tokenize"; }
  absl::string_view synopsis() const override { return "tokenize [flags] [TEXT...]"; }
  absl::string_view summary() const override { return "Token ids of a text, with the server's tokenizer."; }
  std::string description() const override {
    return "The words of TEXT joined by spaces, or stdin with no TEXT or \"-\". Prints the ids "
           "separated by spaces (no BOS is added).";
  }
  void AddFlags(FlagSet& flags) override {
    flags.Add("format", &format_, "text|json", "Output format.");
  }
  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    absl::StatusOr<Format> format = ParseFormat(format_, "format");
    if (!format.ok()) return UsageError(format.status().message());
    std::string text;
    if (args.empty() || (args.size() == 1 && args[0] == "-")) {
      text.assign(std::istreambuf_iterator<char>(context.io.in), {});
    } else {
      text = absl::StrJoin(args, " ");
    }
    absl::StatusOr<std::vector<int32_t>> ids = context.client.Tokenize(text);
    if (!ids.ok()) return ids.status();
    if (*format == Format::kJson) {
      v1::TokenizeResponse response;
      response.mutable_token_ids()->Assign(ids->begin(), ids->end());
      context.io.out << ToJson(response) << "\n";
    } else {
      context.io.out << absl::StrJoin(*ids, " ") << "\n";
    }
    return absl::OkStatus();
  }

 private:
  std::string format_ = "text";
};

class DetokenizeCommand : public Command {
 public:
  absl::string_view name() const override { return "detokenize"; }
  absl::string_view synopsis() const override { return "detokenize ID..."; }
  absl::string_view summary() const override { return "The text of token ids."; }
  std::string description() const override {
    return "IDs are integers separated by spaces or commas. Prints the text as the server "
           "decodes it (ill-formed UTF-8 replaced by U+FFFD).";
  }
  void AddFlags(FlagSet&) override {}
  absl::Status Run(CommandContext& context, const std::vector<std::string>& args) override {
    if (args.empty()) return UsageError("usage: detokenize ID...");
    std::vector<int32_t> ids;
    for (const std::string& arg : args) {
      absl::StatusOr<std::vector<int32_t>> parsed = ParseIntList(arg, "ID");
      if (!parsed.ok()) return UsageError(parsed.status().message());
      ids.insert(ids.end(), parsed->begin(), parsed->end());
    }
    absl::StatusOr<std::string> text = context.client.Detokenize(ids);
    if (!text.ok()) return text.status();
    context.io.out << *text;
    if (context.io.out_is_terminal) context.io.out << "\n";
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Command> NewModelCommand() { return std::make_unique<ModelCommand>(); }
std::unique_ptr<Command> NewHealthCommand() { return std::make_unique<HealthCommand>(); }
std::unique_ptr<Command> NewTokenizeCommand() { return std::make_unique<TokenizeCommand>(); }
std::unique_ptr<Command> NewDetokenizeCommand() { return std::make_unique<DetokenizeCommand>(); }

}  // namespace linserve::cli
