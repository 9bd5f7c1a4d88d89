// ChatTemplate: how chat messages become a prompt text, read from the model directory's
// chat_template.json (docs/openai.md documents the format):
//
//   {
//     "message": "{name}:\n{content}\n\n",     one message; {name} and {content} substituted
//     "nameless_message": "{content}\n\n",     a message whose speaker name is "" (optional;
//                                               default: "{content}\n\n")
//     "generation_prompt": "{name}:\n",        appended after the messages, with the
//                                               assistant's name
//     "names": {"system": "", "user": "ROMEO", "assistant": "JULIET"}
//   }
//
// A message's speaker is its `name` when the client sets one, else the name of its role. The
// placeholders are substituted in one pass: text a client sends is never expanded again.
#ifndef LINSERVE_SERVER_TRANSPORT_CHAT_TEMPLATE_H_
#define LINSERVE_SERVER_TRANSPORT_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linserve {

// The file a model directory holds its chat template in.
inline constexpr absl::string_view kChatTemplateFile = "chat_template.json";

struct ChatMessage {
  std::string role;
  // The speaker's name; nullopt: the role's name from the template.
  std::optional<std::string> name;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the file's JSON; INVALID_ARGUMENT naming `source` and the field at fault.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view json, absl::string_view source);
  // The template of `model_dir`, nullopt when it has no chat_template.json; errors as Parse's
  // (and a file that cannot be read).
  static absl::StatusOr<std::optional<ChatTemplate>> Load(const std::string& model_dir);

  // Roles a message may have: those the template names.
  bool HasRole(absl::string_view role) const { return names_.contains(role); }
  // The prompt text of `messages` followed by the generation prompt. Every role must satisfy
  // HasRole.
  std::string Apply(const std::vector<ChatMessage>& messages) const;

 private:
  std::string message_;
  std::string nameless_message_;
  std::string generation_prompt_;
  absl::flat_hash_map<std::string, std::string> names_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_CHAT_TEMPLATE_H_
