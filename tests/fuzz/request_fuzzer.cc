// libFuzzer target: a Generate request as the transport receives it. The bytes are parsed as a
// linserve.v1.GenerateRequest (as gRPC would), converted to the engine's GenerateRequest
// (server/transport/convert.h) with the byte tokenizer, its constraint compiled through a
// ConstraintCache (the schema, regex and grammar compilers read client text too), and validated
// (server/engine/request.h); a request that passes both stays within every limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "google/protobuf/stubs/logging.h"
#include "linserve/v1/generate.pb.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/token_vocabulary.h"
#include "server/engine/request.h"
#include "server/transport/convert.h"
#include "tests/fuzz/fuzz_inputs.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

// protobuf logs every string field with invalid UTF-8 it rejects: millions of lines.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linserve;
  static const ModelConfig config = fuzz::FuzzConfig();
  static const RequestLimits limits = fuzz::FuzzLimits();
  static const ByteTokenizer tokenizer(config.vocab_size);
  static ConstraintCache constraints(TokenVocabulary::Create(tokenizer, config.eos_token_id),
                                     ConstraintLimits());
  v1::GenerateRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto request = FromProto(proto, tokenizer, limits, constraints, "fuzz");
  if (!request.ok()) return 0;
  Check((request->constraint != nullptr) == FromProto(proto.constraint()).has_value());
  if (request->constraint != nullptr) {
    Check(request->constraint->spec() == *FromProto(proto.constraint()));
  }
  Check(static_cast<int64_t>(proto.text().size()) <= limits.max_prompt_bytes);
  if (!ValidateGenerateRequest(*request, limits, config).ok()) return 0;
  Check(!request->prompt.empty());
  Check(static_cast<int64_t>(request->prompt.size()) <= limits.max_prompt_tokens);
  for (TokenId id : request->prompt) Check(id >= 0 && id < config.vocab_size);
  Check(request->max_new_tokens >= 0 && request->max_new_tokens <= limits.max_new_tokens);
  Check(static_cast<int32_t>(request->stop.size()) <= limits.max_stop_strings);
  for (const std::string& s : request->stop) {
    Check(static_cast<int32_t>(s.size()) <= limits.max_stop_string_bytes);
  }
  Check(static_cast<int32_t>(request->stop_token_ids.size()) <= limits.max_stop_token_ids);
  Check(request->top_logprobs >= 0 && request->top_logprobs <= limits.max_top_logprobs);
  Check(request->prompt_logprobs >= -1 && request->prompt_logprobs <= limits.max_top_logprobs);
  const std::vector<LogitBias>& bias = request->sampling.logit_bias;
  Check(bias.size() <= static_cast<size_t>(kMaxLogitBias));
  for (size_t i = 0; i < bias.size(); ++i) {
    Check(bias[i].token >= 0 && bias[i].token < config.vocab_size);
    Check(bias[i].bias >= -kMaxAbsLogitBias && bias[i].bias <= kMaxAbsLogitBias);
    Check(i == 0 || bias[i - 1].token < bias[i].token);  // sorted, distinct
  }
  Check(request->n >= 1 && request->n <= limits.max_choices);
  Check(!request->session_choice.has_value() ||
        (request->session_id.has_value() && *request->session_choice >= 0 &&
         *request->session_choice < request->n));
  return 0;
}
