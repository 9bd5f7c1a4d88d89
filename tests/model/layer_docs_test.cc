// docs/model-format.md lists exactly the layer kinds and parameters the code declares, with the
// code's types, defaults, ranges and descriptions.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/layers/kinds.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// A row of a kind's table: parameter, type, default, range, meaning.
using Row = std::vector<std::string>;

// Every "### ROLE `NAME`" section of the doc, with its table's rows.
std::map<std::string, std::vector<Row>> DocumentedKinds() {
  std::ifstream file(std::string(LINSERVE_SOURCE_DIR) + "/docs/model-format.md");
  EXPECT_TRUE(file.good());
  std::map<std::string, std::vector<Row>> kinds;
  std::string line;
  std::string current;
  while (std::getline(file, line)) {
    if (line.rfind("### ", 0) == 0) {
      current = line.substr(4);
      kinds[current];
      continue;
    }
    if (current.empty() || line.rfind("| `", 0) != 0) continue;
    Row row;
    for (absl::string_view cell : absl::StrSplit(line, '|')) {
      row.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    // Split on '|' leaves an empty cell before the first and after the last.
    row = Row(row.begin() + 1, row.end() - 1);
    kinds[current].push_back(row);
  }
  return kinds;
}

std::string RangeOf(const ParamSpec& spec) {
  switch (spec.type) {
    case ParamType::kInt:
    case ParamType::kNumber:
      return RangeText(spec);
    case ParamType::kBool:
      return "true, false";
    case ParamType::kChoice:
      return absl::StrJoin(spec.choices, ", ");
  }
  return "";
}

std::vector<Row> CodeRows(const ComponentKind& kind) {
  std::vector<Row> rows;
  for (const ParamSpec& spec : kind.params) {
    rows.push_back({absl::StrCat("`", spec.name, "`"), std::string(TypeText(spec.type)),
                    DefaultText(spec), RangeOf(spec), spec.doc});
  }
  return rows;
}

TEST(LayerDocsTest, TheDocsListExactlyTheDeclaredKindsAndParameters) {
  std::map<std::string, std::vector<Row>> code;
  for (const MixerKind* kind : MixerKinds()) {
    code[absl::StrCat("mixer `", kind->name, "`")] = CodeRows(*kind);
  }
  for (const NormKind* kind : NormKinds()) {
    code[absl::StrCat("norm `", kind->name, "`")] = CodeRows(*kind);
  }
  for (const MlpKind* kind : MlpKinds()) {
    code[absl::StrCat("mlp `", kind->name, "`")] = CodeRows(*kind);
  }
  EXPECT_EQ(DocumentedKinds(), code)
      << "docs/model-format.md's Kinds section must list each kind of model/layers/ with a "
         "table of exactly its parameters";
}

// Each mixer's section says which state precisions the kind allows (MixerKind::bf16_state).
TEST(LayerDocsTest, EachMixerStatesItsStatePrecisions) {
  std::ifstream file(std::string(LINSERVE_SOURCE_DIR) + "/docs/model-format.md");
  ASSERT_TRUE(file.good());
  std::map<std::string, std::string> sections;
  std::string line, current;
  while (std::getline(file, line)) {
    if (line.rfind("### ", 0) == 0) {
      current = line.substr(4);
      continue;
    }
    if (!current.empty()) absl::StrAppend(&sections[current], line, " ");
  }
  for (const MixerKind* kind : MixerKinds()) {
    const std::string& text = sections[absl::StrCat("mixer `", kind->name, "`")];
    EXPECT_THAT(text, HasSubstr(kind->bf16_state
                                    ? "State precision: fp32, or bf16 on CUDA "
                                      "(`--state_precision=bf16`)."
                                    : "State precision: fp32."))
        << kind->name;
  }
}

}  // namespace
}  // namespace linserve
