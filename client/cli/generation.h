// What generate and chat share: the sampling and stop flags, and streaming one generation to
// the terminal.
#ifndef LINSERVE_CLIENT_CLI_GENERATION_H_
#define LINSERVE_CLIENT_CLI_GENERATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/command.h"
#include "client/cli/flag_set.h"
#include "linserve/v1/generate.pb.h"

namespace linserve::cli {

// The GenerateRequest fields other than the prompt and the session. Unset flags leave the
// request's fields unset, so the server's defaults apply.
struct GenerationFlags {
  std::optional<int32_t> max_new_tokens;
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t top_logprobs = 0;
  // "ID=BIAS" entries (SamplingParams.logit_bias), each id at most once.
  std::vector<std::string> logit_bias;
  // Structured output (GenerateRequest.constraint), at most one: a JSON schema file, any JSON
  // object, a regular expression, a GBNF grammar file. Empty / false: not given.
  std::string json_schema_file;
  bool json_object = false;
  std::string regex;
  std::string grammar_file;
  // Print finish reason and usage on stderr after each generation.
  bool usage = false;
  // "text": the generated text on stdout; "jsonl": every GenerateResponse as a JSON line.
  std::string format = "text";

  void AddTo(FlagSet& flags);
  // Fills the sampling and stop fields of `request`. --stop values may use C escapes (\n, \t,
  // \\, \x41); a malformed escape is a usage error naming --stop, a --logit-bias that is not
  // ID=BIAS or names an id twice one naming --logit-bias (the server checks the ranges).
  absl::Status Apply(v1::GenerateRequest& request) const;
  // The constraint the flags ask for, its file read; nullopt: none. A usage error when more
  // than one is given; a file's error names it.
  absl::StatusOr<std::optional<v1::Constraint>> ReadConstraint(Io& io) const;
  // The --format value checked (a usage error otherwise).
  absl::StatusOr<bool> Jsonl() const;
};

struct GenerationResult {
  // The last message: finish_reason and usage.
  v1::GenerateResponse last;
  // All the text generated.
  std::string text;
};

// Streams one generation: text (or JSON lines) to io.out as it arrives, per-token logprobs to
// io.err in text mode when top_logprobs > 0 (and the prompt's, first, with prompt_logprobs),
// then the usage line when flags.usage. With `ids_as_text` (a model without a tokenizer, whose
// text is always empty) text mode writes the generated token ids instead, space-separated.
// Returns the call's error when it fails.
absl::StatusOr<GenerationResult> StreamGeneration(CommandContext& context,
                                                  const v1::GenerateRequest& request,
                                                  const GenerationFlags& flags, bool jsonl,
                                                  bool ids_as_text = false);

// "LENGTH", "STOP", "EOS", "CANCELLED", "CONSTRAINT_COMPLETE".
std::string FinishReasonName(v1::FinishReason reason);

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_GENERATION_H_
