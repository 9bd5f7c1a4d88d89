#include "client/cli/generation.h"

#include <optional>
#include <ostream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/files.h"
#include "client/cli/output.h"

namespace linserve::cli {

void GenerationFlags::AddTo(FlagSet& flags) {
  flags.Add("max-new-tokens", &max_new_tokens, "N",
            "Tokens to generate at most (server default: min(256, its limit)).");
  flags.Add("temperature", &temperature, "T",
            "Sampling temperature, >= 0; 0 = greedy (server default: 1).");
  flags.Add("top-k", &top_k, "K", "Sample among the K most likely tokens; 0 = off.");
  flags.Add("top-p", &top_p, "P", "Nucleus sampling, in (0, 1]; 1 = off.");
  flags.Add("min-p", &min_p, "P",
            "Drop tokens less likely than P times the most likely one, in [0, 1].");
  flags.Add("repetition-penalty", &repetition_penalty, "R",
            "CTRL-style penalty on tokens already in the session, > 0; 1 = off.");
  flags.Add("presence-penalty", &presence_penalty, "X",
            "Subtracted once from every seen token's logit, in [-2, 2].");
  flags.Add("frequency-penalty", &frequency_penalty, "X",
            "Subtracted per occurrence from a seen token's logit, in [-2, 2].");
  flags.Add("seed", &seed, "SEED",
            "Seed of the sampling: same seed and session state, same text (server default: "
            "random, reported by --usage).");
  flags.Add("stop", &stop, "TEXT",
            "Stop when the text contains TEXT (not printed); repeatable; C escapes such as \\n "
            "are understood.");
  flags.Add("stop-token-id", &stop_token_ids, "ID[,ID...]",
            "Stop after sampling one of these token ids; repeatable.");
  flags.Add("ignore-eos", &ignore_eos, "Keep generating after the model's EOS token.");
  flags.Add("top-logprobs", &top_logprobs, "N",
            "Report each token's log-probability and the N most likely alternatives: on stderr "
            "in text format, in the messages in jsonl format.");
  flags.Add("logit-bias", &logit_bias, "ID=BIAS",
            "Add BIAS, in [-100, 100], to token ID's logit before sampling (100 all but forces "
            "it, -100 bans it); repeatable, each ID once.");
  flags.Add("json-schema", &json_schema_file, "FILE",
            "Structured output: the text is JSON valid against the JSON schema in FILE (the "
            "subset docs/server.md lists). At most one of --json-schema, --json-object, --regex "
            "and --grammar.");
  flags.Add("json-object", &json_object, "Structured output: the text is a JSON object.");
  flags.Add("regex", &regex, "PATTERN",
            "Structured output: the whole text matches the regular expression PATTERN.");
  flags.Add("grammar", &grammar_file, "FILE",
            "Structured output: the text is the rule root of the GBNF grammar (llama.cpp's "
            "syntax) in FILE.");
  flags.Add("usage", &usage,
            "After each generation print the finish reason and usage (tokens, time to first "
            "token, seed, request id) on stderr.");
  flags.Add("format", &format, "text|jsonl",
            "text: the generated text on stdout as it arrives; jsonl: every GenerateResponse "
            "as one JSON line.");
}

absl::StatusOr<bool> GenerationFlags::Jsonl() const {
  if (format == "text") return false;
  if (format == "jsonl") return true;
  return UsageError(absl::StrCat("--format=", format, ": expected text or jsonl"));
}

absl::Status GenerationFlags::Apply(v1::GenerateRequest& request) const {
  if (max_new_tokens) request.set_max_new_tokens(*max_new_tokens);
  v1::SamplingParams& s = *request.mutable_sampling();
  if (temperature) s.set_temperature(*temperature);
  if (top_k) s.set_top_k(*top_k);
  if (top_p) s.set_top_p(*top_p);
  if (min_p) s.set_min_p(*min_p);
  if (repetition_penalty) s.set_repetition_penalty(*repetition_penalty);
  if (presence_penalty) s.set_presence_penalty(*presence_penalty);
  if (frequency_penalty) s.set_frequency_penalty(*frequency_penalty);
  if (seed) s.set_seed(*seed);
  for (const std::string& text : stop) {
    std::string unescaped;
    std::string error;
    if (!absl::CUnescape(text, &unescaped, &error)) {
      return UsageError(absl::StrCat("--stop=", text, ": ", error));
    }
    request.add_stop(unescaped);
  }
  request.mutable_stop_token_ids()->Assign(stop_token_ids.begin(), stop_token_ids.end());
  request.set_ignore_eos(ignore_eos);
  request.set_top_logprobs(top_logprobs);
  for (const std::string& entry : logit_bias) {
    const std::pair<std::string, std::string> parts =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    int32_t id = 0;
    float bias = 0.0f;
    if (!absl::SimpleAtoi(parts.first, &id) || !absl::SimpleAtof(parts.second, &bias)) {
      return UsageError(absl::StrCat("--logit-bias=", entry, ": expected ID=BIAS"));
    }
    if (!s.mutable_logit_bias()->insert({id, bias}).second) {
      return UsageError(absl::StrCat("--logit-bias=", entry, ": token ", id, " given twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::Constraint>> GenerationFlags::ReadConstraint(Io& io) const {
  const int given = !json_schema_file.empty() + json_object + !regex.empty() +
                    !grammar_file.empty();
  if (given > 1) {
    return UsageError("give at most one of --json-schema, --json-object, --regex and --grammar");
  }
  v1::Constraint constraint;
  if (!json_schema_file.empty()) {
    absl::StatusOr<std::string> schema = ReadWholeFile(json_schema_file, io);
    if (!schema.ok()) return schema.status();
    constraint.set_json_schema(*std::move(schema));
  } else if (json_object) {
    constraint.mutable_json_object();
  } else if (!regex.empty()) {
    constraint.set_regex(regex);
  } else if (!grammar_file.empty()) {
    absl::StatusOr<std::string> grammar = ReadWholeFile(grammar_file, io);
    if (!grammar.ok()) return grammar.status();
    constraint.set_grammar(*std::move(grammar));
  } else {
    return std::nullopt;
  }
  return constraint;
}

std::string FinishReasonName(v1::FinishReason reason) {
  return std::string(absl::StripPrefix(v1::FinishReason_Name(reason), "FINISH_REASON_"));
}

absl::StatusOr<GenerationResult> StreamGeneration(CommandContext& context,
                                                  const v1::GenerateRequest& request,
                                                  const GenerationFlags& flags, bool jsonl,
                                                  bool ids_as_text) {
  Io& io = context.io;
  GenerationResult result;
  bool first_id = true;
  v1::GenerateResponse& last = result.last;
  const absl::Status status = context.client.Generate(
      request,
      [&](const v1::GenerateResponse& response) {
        result.text += response.text();
        if (jsonl) {
          io.out << ToJson(response) << "\n";
        } else {
          for (const v1::PromptToken& token : response.prompt_tokens()) {
            io.err << absl::StrFormat("prompt token %d logprob ", token.id());
            io.err << (token.has_logprob() ? absl::StrFormat("%.4f", token.logprob()) : "-");
            if (!token.top_logprobs().empty()) io.err << " top";
            for (const v1::TokenLogprob& alt : token.top_logprobs()) {
              io.err << absl::StrFormat(" %d:%.4f", alt.id(), alt.logprob());
            }
            io.err << "\n";
          }
          io.out << response.text();
          if (ids_as_text) {
            for (const v1::GeneratedToken& token : response.tokens()) {
              io.out << (first_id ? "" : " ") << token.id();
              first_id = false;
            }
          }
          for (const v1::GeneratedToken& token : response.tokens()) {
            if (request.top_logprobs() == 0) break;
            io.err << absl::StrFormat("token %d logprob %.4f top", token.id(), token.logprob());
            for (const v1::TokenLogprob& alt : token.top_logprobs()) {
              io.err << absl::StrFormat(" %d:%.4f", alt.id(), alt.logprob());
            }
            io.err << "\n";
          }
        }
        io.out.flush();
        if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = response;
        // With several choices the usage comes last, in a message of its own.
        if (response.has_usage()) *last.mutable_usage() = response.usage();
        return true;
      },
      context.stream_options);
  if (!status.ok()) return status;
  if (flags.usage) {
    const v1::Usage& u = last.usage();
    io.err << absl::StrFormat(
        "finish %s; prompt %d tokens (%d cached), generated %d tokens, session %d tokens; "
        "first token %.1f ms, total %.1f ms; seed %d; request %s\n",
        FinishReasonName(last.finish_reason()), u.prompt_tokens(), u.cached_prompt_tokens(),
        u.generated_tokens(), u.session_tokens(), u.time_to_first_token_us() / 1e3,
        u.total_time_us() / 1e3, u.seed(), last.request_id());
  }
  return result;
}

}  // namespace linserve::cli
