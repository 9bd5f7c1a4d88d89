#include "server/constraints/constraint_spec.h"

#include "absl/strings/str_cat.h"

namespace linserve {

std::string_view ToString(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kGrammar:
      return "grammar";
  }
  return "unknown";
}

absl::Status ValidateConstraintLimits(const ConstraintLimits& limits) {
  const struct {
    const char* name;
    int64_t value;
    int64_t max;
  } fields[] = {
      {"max_text_bytes", limits.max_text_bytes, int64_t{1} << 24},
      {"max_grammar_elements", limits.max_grammar_elements, int64_t{1} << 26},
      {"max_nesting_depth", limits.max_nesting_depth, 1024},
      {"max_matcher_stacks", limits.max_matcher_stacks, int64_t{1} << 20},
      {"cache_entries", limits.cache_entries, 1 << 16},
      {"max_cached_masks", limits.max_cached_masks, int64_t{1} << 24},
  };
  for (const auto& field : fields) {
    if (field.value < 1 || field.value > field.max) {
      return absl::InvalidArgumentError(absl::StrCat("constraint limit ", field.name, " must be in [1, ",
                                                     field.max, "], got ", field.value));
    }
  }
  return absl::OkStatus();
}

}  // namespace linserve
