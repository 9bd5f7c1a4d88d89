// The decimal integers in a range as a GBNF expression: what a JSON schema's minimum / maximum
// (and their exclusive forms) allow an integer to be. JSON integers have no leading zeros and no
// "-0"; without a bound on a side the integer has at most kMaxIntegerDigits digits on it, as an
// unbounded JSON integer has (json_schema_grammar.cc).
#ifndef LINSERVE_SERVER_CONSTRAINTS_INTEGER_RANGE_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_INTEGER_RANGE_GRAMMAR_H_

#include <cstdint>
#include <optional>
#include <string>

namespace linserve {

// Digits an integer without a bound may have: 16, the digits of 2^53 (JavaScript's safe
// integers).
inline constexpr int kMaxIntegerDigits = 16;

// The integers in [min, max] (nullopt: no bound on that side), as one parenthesised GBNF
// expression; min <= max (the caller checks), each within ±(10^kMaxIntegerDigits - 1).
std::string IntegerRangeGbnf(std::optional<int64_t> min, std::optional<int64_t> max);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_INTEGER_RANGE_GRAMMAR_H_
