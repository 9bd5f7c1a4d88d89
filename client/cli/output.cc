#include "client/cli/output.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"

namespace linserve::cli {
namespace {

std::string FormatTimestamp(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  const absl::Time time = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

// "linear_attention(n_heads=4, head_dim=8, ...)".
std::string FormatComponent(const v1::LayerComponent& component) {
  return absl::StrCat(component.kind(), "(",
                      absl::StrJoin(component.params(), ", ",
                                    [](std::string* out, const v1::LayerParam& param) {
                                      absl::StrAppend(out, param.name(), "=", param.value());
                                    }),
                      ")");
}

}  // namespace

absl::StatusOr<Format> ParseFormat(absl::string_view text, absl::string_view flag) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", text, ": expected text or json"));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  // Printing a well-formed message cannot fail; an empty object stands in if it ever does.
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

std::string ResidencyName(const v1::Session& session) {
  switch (session.residency()) {
    case v1::Session::RESIDENCY_RESIDENT:
      return "RESIDENT";
    case v1::Session::RESIDENCY_HIBERNATED:
      return "HIBERNATED";
    default:
      return "UNSPECIFIED";
  }
}

std::string FormatSession(const v1::Session& s) {
  return absl::StrCat("id: ", s.id(), "\ntokens: ", s.num_tokens(),
                      "\nresidency: ", ResidencyName(s), "\nbusy: ", s.busy() ? "yes" : "no",
                      "\ncreated: ", FormatTimestamp(s.create_time()),
                      "\nlast used: ", FormatTimestamp(s.last_use_time()),
                      "\nboundaries: ", absl::StrJoin(s.boundaries(), " "), "\n");
}

std::string SessionTableHeader() {
  return absl::StrFormat("%-32s  %10s  %-10s  %-4s  %-20s  %-20s\n", "ID", "TOKENS", "RESIDENCY",
                         "BUSY", "CREATED", "LAST USED");
}

std::string FormatSessionRow(const v1::Session& s) {
  return absl::StrFormat("%-32s  %10d  %-10s  %-4s  %-20s  %-20s\n", s.id(), s.num_tokens(),
                         ResidencyName(s), s.busy() ? "yes" : "no",
                         FormatTimestamp(s.create_time()), FormatTimestamp(s.last_use_time()));
}

std::string FormatModelInfo(const v1::GetModelInfoResponse& info) {
  const v1::ModelInfo& m = info.model();
  const v1::ServerLimits& l = info.limits();
  const v1::ServerLoad& load = info.load();
  std::string out;
  auto line = [&out](absl::string_view key, const auto& value) {
    absl::StrAppend(&out, key, ": ", value, "\n");
  };
  line("architecture", m.architecture());
  line("parameters", m.parameter_count());
  line("vocab size", m.vocab_size());
  line("layers", m.n_layers());
  line("d_model", m.d_model());
  // The single-block fields: 0 for a model whose layers differ, which only the list describes.
  if (m.n_heads() > 0) {
    line("heads", absl::StrCat(m.n_heads(), " x ", m.head_dim()));
    line("d_ff", m.d_ff());
    line("feature map", absl::StrCat(m.feature_map(), " (", m.feature_dim(), " features)"));
  }
  line("norm", m.norm());
  if (m.n_heads() > 0) line("activation", m.activation());
  line("position", m.position());
  for (int i = 0; i < m.layers_size(); ++i) {
    const v1::LayerInfo& layer = m.layers(i);
    line(absl::StrCat("layer ", i),
         absl::StrCat("mixer ", FormatComponent(layer.mixer()), "; norm ",
                      FormatComponent(layer.norm()), "; mlp ", FormatComponent(layer.mlp()),
                      "; state ", layer.state_bytes(), " bytes"));
  }
  if (m.has_final_norm()) line("final norm", FormatComponent(m.final_norm()));
  line("tokenizer", m.tokenizer());
  line("bos token id", m.bos_token_id());
  line("eos token id", m.eos_token_id());
  line("fingerprint", m.fingerprint());
  line("device", info.device());
  line("state bytes per session", info.state_bytes_per_session());
  line("slot capacity", info.slot_capacity());
  line("limit max_new_tokens", l.max_new_tokens());
  line("limit max_prompt_tokens", l.max_prompt_tokens());
  line("limit max_stop_strings", l.max_stop_strings());
  line("limit max_stop_string_bytes", l.max_stop_string_bytes());
  line("limit max_stop_token_ids", l.max_stop_token_ids());
  line("limit max_top_logprobs", l.max_top_logprobs());
  line("limit max_choices", l.max_choices());
  line("limit max_sessions", l.max_sessions());
  line("limit max_queue_depth", l.max_queue_depth());
  line("limit max_batch_size", l.max_batch_size());
  line("limit prefill_token_budget", l.prefill_token_budget());
  line("limit prefill_tokens_per_decode_row", l.prefill_tokens_per_decode_row());
  line("limit idle_prefill_token_budget", l.idle_prefill_token_budget());
  line("load free_slots", load.free_slots());
  line("load active_requests", load.active_requests());
  line("load queued_requests", load.queued_requests());
  line("load resident_sessions", load.resident_sessions());
  line("load hibernated_sessions", load.hibernated_sessions());
  return out;
}

}  // namespace linserve::cli
