#include "server/transport/convert.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/transport/random_seed.h"

namespace linserve {
namespace {

void ToTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  const int64_t micros = absl::ToUnixMicros(time);
  out->set_seconds(micros / 1000000);
  out->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

// A parameter's value as config.json spells it; a string without its quotes.
std::string ParamText(const ParamValue& value) {
  struct Printer {
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    // JSON's shortest form that reads back as the same double.
    std::string operator()(double v) const { return nlohmann::json(v).dump(); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v; }
  };
  return std::visit(Printer{}, value);
}

void ToProto(const ComponentSpec& component, v1::LayerComponent* out) {
  out->set_kind(component.kind);
  for (const auto& [name, value] : component.params.entries()) {
    v1::LayerParam* param = out->add_params();
    param->set_name(name);
    param->set_value(ParamText(value));
  }
}

absl::Status TooMany(absl::string_view field, size_t count, absl::string_view unit, int64_t limit,
                     absl::string_view limit_name) {
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": ", count, " ", unit, " exceed the limit of ", limit, " (", limit_name, ")"));
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

std::optional<ConstraintSpec> FromProto(const v1::Constraint& in) {
  switch (in.kind_case()) {
    case v1::Constraint::kJsonSchema:
      return ConstraintSpec{ConstraintKind::kJsonSchema, in.json_schema()};
    case v1::Constraint::kJsonObject:
      return ConstraintSpec{ConstraintKind::kJsonObject, ""};
    case v1::Constraint::kRegex:
      return ConstraintSpec{ConstraintKind::kRegex, in.regex()};
    case v1::Constraint::kGrammar:
      return ConstraintSpec{ConstraintKind::kGrammar, in.grammar()};
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  return std::nullopt;
}

absl::StatusOr<GenerateRequest> FromProto(const v1::GenerateRequest& in,
                                          const Tokenizer& tokenizer,
                                          const RequestLimits& limits,
                                          ConstraintCache& constraints, std::string request_id) {
  GenerateRequest out;
  out.request_id = std::move(request_id);
  switch (in.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (in.text().empty()) {
        return absl::InvalidArgumentError("prompt.text: must not be empty");
      }
      absl::StatusOr<std::vector<TokenId>> ids =
          TokenizeText(in.text(), "prompt.text", tokenizer, limits);
      if (!ids.ok()) return ids.status();
      out.prompt = *std::move(ids);
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      if (in.token_ids().ids_size() > limits.max_prompt_tokens) {
        return TooMany("prompt.token_ids", in.token_ids().ids_size(), "ids",
                       limits.max_prompt_tokens, "max_prompt_tokens");
      }
      out.prompt.assign(in.token_ids().ids().begin(), in.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError(
          "prompt: required: set prompt.text or prompt.token_ids");
  }
  if (!in.session_id().empty()) {
    absl::StatusOr<SessionId> id = ParseSessionId(in.session_id(), "session_id");
    if (!id.ok()) return id.status();
    out.session_id = *std::move(id);
  }
  out.max_new_tokens = in.has_max_new_tokens()
                           ? in.max_new_tokens()
                           : std::min(kDefaultMaxNewTokens, limits.max_new_tokens);
  const v1::SamplingParams& s = in.sampling();
  if (s.has_temperature()) out.sampling.temperature = s.temperature();
  if (s.has_top_k()) out.sampling.top_k = s.top_k();
  if (s.has_top_p()) out.sampling.top_p = s.top_p();
  if (s.has_min_p()) out.sampling.min_p = s.min_p();
  if (s.has_repetition_penalty()) out.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out.sampling.frequency_penalty = s.frequency_penalty();
  // Bounded before anything is copied; ValidateGenerateRequest checks the entries. Sorted by
  // token, so that a request's stream does not depend on the map's order.
  if (s.logit_bias_size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias: ", s.logit_bias_size(),
                                                   " entries exceed the limit of ", kMaxLogitBias));
  }
  for (const auto& [token, bias] : s.logit_bias()) out.sampling.logit_bias.push_back({token, bias});
  std::sort(out.sampling.logit_bias.begin(), out.sampling.logit_bias.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  if (s.has_seed()) {
    out.sampling.seed = s.seed();
  } else {
    absl::StatusOr<uint64_t> seed = RandomSeed();
    if (!seed.ok()) return seed.status();
    out.sampling.seed = *seed;
  }
  // Sizes are checked before anything is copied; ValidateGenerateRequest checks the values.
  if (in.stop_size() > limits.max_stop_strings) {
    return TooMany("stop", in.stop_size(), "stop strings", limits.max_stop_strings,
                   "max_stop_strings");
  }
  for (int i = 0; i < in.stop_size(); ++i) {
    if (in.stop(i).size() > static_cast<size_t>(limits.max_stop_string_bytes)) {
      return TooMany(absl::StrCat("stop[", i, "]"), in.stop(i).size(), "bytes",
                     limits.max_stop_string_bytes, "max_stop_string_bytes");
    }
  }
  if (in.stop_token_ids_size() > limits.max_stop_token_ids) {
    return TooMany("stop_token_ids", in.stop_token_ids_size(), "ids", limits.max_stop_token_ids,
                   "max_stop_token_ids");
  }
  out.stop.assign(in.stop().begin(), in.stop().end());
  out.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  out.ignore_eos = in.ignore_eos();
  out.top_logprobs = in.top_logprobs();
  if (in.has_prompt_logprobs()) {
    // -1 is the engine's "none": a client's negative value is refused here, by its own name.
    if (in.prompt_logprobs() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_logprobs: must be >= 0 (or unset), got ", in.prompt_logprobs()));
    }
    out.prompt_logprobs = in.prompt_logprobs();
  }
  // Bounded before the transport makes a sink per choice.
  if (in.has_n()) {
    if (in.n() < 1 || in.n() > limits.max_choices) {
      return absl::InvalidArgumentError(absl::StrCat("n: must be in [1, ", limits.max_choices,
                                                     "] (max_choices), got ", in.n()));
    }
    out.n = in.n();
  }
  if (in.has_session_choice()) out.session_choice = in.session_choice();
  if (std::optional<ConstraintSpec> spec = FromProto(in.constraint()); spec.has_value()) {
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
        constraints.Get(*spec, "constraint." + std::string(ToString(spec->kind)));
    if (!compiled.ok()) return compiled.status();
    out.constraint = *std::move(compiled);
  }
  return out;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kConstraintComplete:
      return v1::FINISH_REASON_CONSTRAINT_COMPLETE;
    case FinishReason::kError:
      break;  // a failed request ends with its status, never with a finish reason
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void ToProto(const GeneratedToken& token, v1::GeneratedToken* out) {
  out->set_id(token.id);
  out->set_logprob(token.logprob);
  for (const TokenLogprob& alt : token.top_logprobs) {
    v1::TokenLogprob* p = out->add_top_logprobs();
    p->set_id(alt.token);
    p->set_logprob(alt.logprob);
  }
}

void ToProto(const PromptToken& token, v1::PromptToken* out) {
  out->set_id(token.id);
  if (token.logprob.has_value()) out->set_logprob(*token.logprob);
  for (const TokenLogprob& alt : token.top_logprobs) {
    v1::TokenLogprob* p = out->add_top_logprobs();
    p->set_id(alt.token);
    p->set_logprob(alt.logprob);
  }
}

void ToProto(const Usage& usage, v1::Usage* out) {
  out->set_prompt_tokens(usage.prompt_tokens);
  out->set_generated_tokens(usage.generated_tokens);
  out->set_time_to_first_token_us(absl::ToInt64Microseconds(usage.time_to_first_token));
  out->set_total_time_us(absl::ToInt64Microseconds(usage.total_time));
  out->set_seed(usage.seed);
  out->set_session_tokens(usage.session_tokens);
  out->set_cached_prompt_tokens(usage.cached_prompt_tokens);
}

void ToProto(const SessionInfo& info, v1::Session* out) {
  out->set_id(info.id.value);
  out->set_num_tokens(info.num_tokens);
  out->set_residency(info.resident ? v1::Session::RESIDENCY_RESIDENT
                                   : v1::Session::RESIDENCY_HIBERNATED);
  out->set_busy(info.busy);
  ToTimestamp(info.create_time, out->mutable_create_time());
  ToTimestamp(info.last_use_time, out->mutable_last_use_time());
  for (int64_t boundary : info.boundaries) out->add_boundaries(boundary);
}

void ToProto(const ModelConfig& c, v1::ModelInfo* out) {
  out->set_architecture(c.architecture);
  out->set_vocab_size(c.vocab_size);
  out->set_d_model(c.d_model);
  out->set_n_layers(c.n_layers);
  if (c.IsSingleBlock()) {
    out->set_n_heads(c.n_heads);
    out->set_head_dim(c.head_dim);
    out->set_d_ff(c.d_ff);
    out->set_feature_dim(c.feature_dim);
    out->set_feature_map(std::string(ToString(c.feature_map)));
    out->set_activation(std::string(ToString(c.activation)));
  }
  out->set_norm(std::string(ToString(c.norm)));
  out->set_position(std::string(ToString(c.position)));
  out->set_tokenizer(std::string(ToString(c.tokenizer)));
  out->set_bos_token_id(c.bos_token_id);
  out->set_eos_token_id(c.eos_token_id);
  const std::vector<LayerSpec> layers = c.LayerList();
  const std::vector<int64_t> offsets = c.StateOffsets();
  for (size_t i = 0; i < layers.size(); ++i) {
    v1::LayerInfo* layer = out->add_layers();
    ToProto(layers[i].mixer, layer->mutable_mixer());
    ToProto(layers[i].norm, layer->mutable_norm());
    ToProto(layers[i].mlp, layer->mutable_mlp());
    layer->set_state_bytes((offsets[i + 1] - offsets[i]) * static_cast<int64_t>(sizeof(float)));
  }
  if (c.norm == NormPlacement::kPre) ToProto(c.FinalNorm(), out->mutable_final_norm());
}

void ToProto(const Engine& engine, v1::GetModelInfoResponse* out) {
  const Model& model = engine.model();
  const ModelConfig& c = model.config;
  v1::ModelInfo* m = out->mutable_model();
  ToProto(c, m);
  m->set_parameter_count(model.weights.ParameterCount());
  m->set_fingerprint(model.fingerprint);

  out->set_device(engine.device() == DeviceKind::kCuda ? "cuda" : "cpu");
  out->set_state_bytes_per_session(c.StateFloatsPerSlot() * static_cast<int64_t>(sizeof(float)));
  out->set_slot_capacity(engine.slot_capacity());

  const EngineOptions& o = engine.options();
  v1::ServerLimits* l = out->mutable_limits();
  l->set_max_new_tokens(o.requests.max_new_tokens);
  l->set_max_prompt_tokens(o.requests.max_prompt_tokens);
  l->set_max_prompt_bytes(o.requests.max_prompt_bytes);
  l->set_max_stop_strings(o.requests.max_stop_strings);
  l->set_max_stop_string_bytes(o.requests.max_stop_string_bytes);
  l->set_max_stop_token_ids(o.requests.max_stop_token_ids);
  l->set_max_top_logprobs(o.requests.max_top_logprobs);
  l->set_max_choices(o.requests.max_choices);
  l->set_max_sessions(o.sessions.max_sessions);
  l->set_max_queue_depth(o.max_queue_depth);
  l->set_max_batch_size(o.scheduler.max_batch_size);
  l->set_prefill_token_budget(o.scheduler.prefill_token_budget);
  l->set_prefill_tokens_per_decode_row(o.scheduler.prefill_tokens_per_decode_row);
  l->set_idle_prefill_token_budget(o.scheduler.idle_prefill_token_budget);
  const ConstraintLimits& constraints = o.constraint_limits;
  l->set_constraint_max_text_bytes(constraints.max_text_bytes);
  l->set_constraint_max_grammar_elements(constraints.max_grammar_elements);
  l->set_constraint_max_nesting_depth(constraints.max_nesting_depth);
  l->set_constraint_max_matcher_stacks(constraints.max_matcher_stacks);
  l->set_constraint_cache_entries(constraints.cache_entries);
  l->set_constraint_max_cached_masks(constraints.max_cached_masks);

  const EngineStats stats = engine.stats();
  v1::ServerLoad* load = out->mutable_load();
  load->set_free_slots(stats.free_slots);
  load->set_active_requests(stats.active_requests);
  load->set_queued_requests(stats.queued_requests);
  load->set_resident_sessions(stats.resident_sessions);
  load->set_hibernated_sessions(stats.hibernated_sessions);
}

}  // namespace linserve
