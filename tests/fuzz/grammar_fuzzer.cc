// libFuzzer target: GBNF parsing (server/constraints/grammar.h) and the parse stacks over the
// grammar it reads (parse_stacks.h). An accepted grammar is within the limits; the input's own
// bytes, fed as a document, step the stacks without ever exceeding max_matcher_stacks, and every
// stack set met encodes and decodes back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "server/constraints/grammar.h"
#include "server/constraints/parse_stacks.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

void CheckRoundTrip(const linserve::Grammar& grammar, const linserve::ParseStacks& stacks,
                    int32_t max_stacks) {
  std::string bytes;
  stacks.Encode(&bytes);
  std::string_view view = bytes;
  auto decoded = linserve::ParseStacks::Decode(grammar, max_stacks, &view);
  Check(decoded.ok() && view.empty() && *decoded == stacks);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linserve;
  ConstraintLimits limits;
  limits.max_text_bytes = 4096;
  limits.max_grammar_elements = 4096;
  limits.max_nesting_depth = 16;
  limits.max_matcher_stacks = 64;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto grammar = ParseGbnf(text, limits);
  if (!grammar.ok()) return 0;
  Check(grammar->num_elements() <= limits.max_grammar_elements);
  ParseStepper stepper(&*grammar, limits.max_matcher_stacks);
  ParseStacks stacks, next;
  if (!stepper.Start(&stacks).ok()) return 0;
  Check(!stacks.empty() && stacks.size() <= limits.max_matcher_stacks);
  CheckRoundTrip(*grammar, stacks, limits.max_matcher_stacks);
  for (size_t i = 0; i < text.size() && i < 256; ++i) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    if (!stacks.next_bytes().Contains(byte)) break;
    if (!stepper.Step(stacks, byte, &next).ok()) break;
    // A byte in next_bytes() always leaves some stack (every position can complete).
    Check(!next.empty() && next.size() <= limits.max_matcher_stacks);
    std::swap(stacks, next);
    CheckRoundTrip(*grammar, stacks, limits.max_matcher_stacks);
  }
  return 0;
}
