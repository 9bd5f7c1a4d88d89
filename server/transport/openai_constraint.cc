#include "server/transport/openai_constraint.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/transport/openai_json_fields.h"

namespace linserve {
namespace {

using nlohmann::json;

// A constraint as the request carried it.
struct RequestedConstraint {
  ConstraintSpec spec;
  // The request's field (response_format or a guided_* field), for errors about the request.
  std::string field;
  // The field holding the constraint's text, for the compiler's errors.
  std::string text_field;
};

std::optional<RequestedConstraint> Requested(ConstraintKind kind, std::string text,
                                             std::string field, std::string text_field) {
  std::optional<RequestedConstraint> out(std::in_place);
  out->spec.kind = kind;
  out->spec.text = std::move(text);
  out->field = std::move(field);
  out->text_field = std::move(text_field);
  return out;
}

// OpenAI's response_format: {"type": "text"} (no constraint), {"type": "json_object"}, or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}.
absl::StatusOr<std::optional<RequestedConstraint>> ResponseFormat(const json& body) {
  const json* format = JsonMember(body, "response_format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) {
    return InvalidField("response_format", "must be an object with a \"type\"");
  }
  const json* type = JsonMember(*format, "type");
  if (type == nullptr || !type->is_string()) {
    return InvalidField("response_format.type",
                        "required: \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string& kind = type->get_ref<const std::string&>();
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    return Requested(ConstraintKind::kJsonObject, "", "response_format", "response_format");
  }
  if (kind != "json_schema") {
    return InvalidField("response_format.type",
                        absl::StrCat("\"", kind,
                                     "\" is not one of \"text\", \"json_object\", "
                                     "\"json_schema\""));
  }
  const json* spec = JsonMember(*format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return InvalidField("response_format.json_schema",
                        "required with \"type\": \"json_schema\": an object with \"name\" and "
                        "\"schema\"");
  }
  // OpenAI's rule for the name: 1 to 64 of a-z, A-Z, 0-9, _ and -.
  const json* name = JsonMember(*spec, "name");
  if (name == nullptr || !name->is_string()) {
    return InvalidField("response_format.json_schema.name", "required: a string");
  }
  const std::string& n = name->get_ref<const std::string&>();
  if (n.empty() || n.size() > 64 || !std::all_of(n.begin(), n.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_' || c == '-';
      })) {
    return InvalidField("response_format.json_schema.name",
                        "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  }
  if (const json* d = JsonMember(*spec, "description"); d != nullptr && !d->is_string()) {
    return InvalidField("response_format.json_schema.description", "must be a string");
  }
  // Strict or not, the output follows the schema exactly: a keyword the server cannot enforce
  // is refused either way.
  if (const json* strict = JsonMember(*spec, "strict");
      strict != nullptr && !strict->is_boolean()) {
    return InvalidField("response_format.json_schema.strict", "must be true or false");
  }
  const json* schema = JsonMember(*spec, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return InvalidField("response_format.json_schema.schema",
                        "required: a JSON schema (an object)");
  }
  return Requested(ConstraintKind::kJsonSchema, schema->dump(), "response_format",
                   "response_format.json_schema.schema");
}

// vLLM's guided_json (a schema, or a string holding one), guided_regex and guided_grammar.
absl::StatusOr<std::optional<RequestedConstraint>> Guided(const json& body, const char* name,
                                                         ConstraintKind kind) {
  const json* v = JsonMember(body, name);
  if (v == nullptr) return std::nullopt;
  std::string text;
  if (v->is_string()) {
    text = v->get<std::string>();
  } else if (kind == ConstraintKind::kJsonSchema && v->is_object()) {
    text = v->dump();
  } else {
    return InvalidField(name, kind == ConstraintKind::kJsonSchema
                                  ? "must be a JSON schema: an object, or a string holding one"
                                  : "must be a string");
  }
  return Requested(kind, std::move(text), name, name);
}

}  // namespace

// At most one of response_format (but "text"), guided_json, guided_regex and guided_grammar,
// compiled through context.constraints.
absl::Status ParseOpenAiConstraint(const json& body, const OpenAiContext& context,
                                   OpenAiRequest& out) {
  if (JsonMember(body, "guided_choice") != nullptr) {
    return InvalidField("guided_choice",
                        "not supported: use guided_regex with the choices as alternatives, e.g. "
                        "\"(yes|no)\"");
  }
  std::optional<RequestedConstraint> chosen;
  auto take = [&](absl::StatusOr<std::optional<RequestedConstraint>> requested) {
    if (!requested.ok()) return requested.status();
    if (!requested->has_value()) return absl::OkStatus();
    if (chosen.has_value()) {
      return InvalidField((*requested)->field,
                          absl::StrCat("cannot be combined with ", chosen->field,
                                       ": a request takes at most one of response_format, "
                                       "guided_json, guided_regex and guided_grammar"));
    }
    chosen = **std::move(requested);
    return absl::OkStatus();
  };
  if (absl::Status s = take(ResponseFormat(body)); !s.ok()) return s;
  if (absl::Status s = take(Guided(body, "guided_json", ConstraintKind::kJsonSchema)); !s.ok()) {
    return s;
  }
  if (absl::Status s = take(Guided(body, "guided_regex", ConstraintKind::kRegex)); !s.ok()) {
    return s;
  }
  if (absl::Status s = take(Guided(body, "guided_grammar", ConstraintKind::kGrammar)); !s.ok()) {
    return s;
  }
  if (!chosen.has_value()) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      context.constraints->Get(chosen->spec, chosen->text_field);
  if (!compiled.ok()) return compiled.status();
  out.generate.constraint = *std::move(compiled);
  out.constraint_field = std::move(chosen->field);
  return absl::OkStatus();
}

}  // namespace linserve
