#include "server/transport/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

absl::Status Invalid(absl::string_view source, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, ": ", what));
}

absl::StatusOr<std::string> StringField(const nlohmann::json& j, const char* field,
                                        absl::string_view source,
                                        std::optional<std::string> fallback) {
  auto it = j.find(field);
  if (it == j.end()) {
    if (fallback.has_value()) return *std::move(fallback);
    return Invalid(source, field, "required");
  }
  if (!it->is_string()) return Invalid(source, field, "must be a string");
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view json, absl::string_view source) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  ChatTemplate t;
  absl::StatusOr<std::string> message = StringField(j, "message", source, std::nullopt);
  absl::StatusOr<std::string> nameless =
      StringField(j, "nameless_message", source, "{content}\n\n");
  absl::StatusOr<std::string> prompt = StringField(j, "generation_prompt", source, std::nullopt);
  for (const auto* s : {&message, &nameless, &prompt}) {
    if (!s->ok()) return s->status();
  }
  t.message_ = *std::move(message);
  t.nameless_message_ = *std::move(nameless);
  t.generation_prompt_ = *std::move(prompt);
  auto names = j.find("names");
  if (names == j.end() || !names->is_object()) {
    return Invalid(source, "names", "required: an object of role -> speaker name");
  }
  for (const auto& [role, name] : names->items()) {
    if (!name.is_string()) {
      return Invalid(source, absl::StrCat("names.", role), "must be a string");
    }
    t.names_[role] = name.get<std::string>();
  }
  if (!t.names_.contains("user") || !t.names_.contains("assistant")) {
    return Invalid(source, "names", "must name the roles \"user\" and \"assistant\"");
  }
  return t;
}

absl::StatusOr<std::optional<ChatTemplate>> ChatTemplate::Load(const std::string& model_dir) {
  const std::filesystem::path path =
      std::filesystem::path(model_dir) / std::string(kChatTemplateFile);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::optional<ChatTemplate>();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path.string()));
  absl::StatusOr<ChatTemplate> parsed = Parse(contents.str(), path.string());
  if (!parsed.ok()) return parsed.status();
  return std::optional<ChatTemplate>(*std::move(parsed));
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages) const {
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string& name = m.name.has_value() ? *m.name : names_.at(m.role);
    absl::StrAppend(&out, absl::StrReplaceAll(name.empty() ? nameless_message_ : message_,
                                              {{"{name}", name}, {"{content}", m.content}}));
  }
  absl::StrAppend(&out,
                  absl::StrReplaceAll(generation_prompt_, {{"{name}", names_.at("assistant")}}));
  return out;
}

}  // namespace linserve
