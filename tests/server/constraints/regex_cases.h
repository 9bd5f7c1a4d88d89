// Acceptance data for RegexToGbnf: patterns, strings each must accept (whole) and strings each
// must reject. `ecmascript`: std::regex (ECMAScript) reads the pattern the same way over these
// bytes, so the data can be cross-checked against it.
#ifndef LINSERVE_TESTS_SERVER_CONSTRAINTS_REGEX_CASES_H_
#define LINSERVE_TESTS_SERVER_CONSTRAINTS_REGEX_CASES_H_

#include <string>
#include <vector>

namespace linserve {

struct RegexCase {
  std::string pattern;
  bool ecmascript;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

inline std::vector<RegexCase> RegexCases() {
  return {
      {R"([a-z]+@[a-z]+\.com)", true, {"a@b.com", "xyz@q.com"},
       {"@b.com", "a@b.co", "A@b.com", "a@b.comm", "a@bxcom"}},
      {R"(\d{3}-\d{4})", true, {"555-1234"}, {"5551234", "555-123", "555-12345"}},
      {R"((cat|dog)s?)", true, {"cat", "dogs"}, {"cats ", "bird", "catdog"}},
      {R"(a{2,3}b*?c??)", true, {"aa", "aaab", "aabbbc"}, {"a", "aaaa", "aacc"}},
      {R"((?:ab|cd)*e)", true, {"e", "abe", "cdabe"}, {"ab", "ace"}},
      {R"([^0-9\s]+)", true, {"abc", "é", "a-b"}, {"a b", "a1"}},
      {R"(.+)", true, {"x", "a b", "é☃"}, {"a\nb", "\n"}},
      {R"(^(a|b|)c$)", true, {"c", "ac", "bc"}, {"abc", "a"}},
      {R"(\w+\s\W)", true, {"ab_1 !"}, {"ab c", "ab 1"}},
      {R"([\d.]+)", true, {"1.5", "..."}, {"1,5"}},
      {R"([-a]{2}x{1,}[b-])", true, {"-axb", "aaxxx-"}, {"-ab", "axb"}},
      {R"(\x41\u00e9[\-\]])", false, {"Aé-", "Aé]"}, {"Ae-", "Aé["}},
      {R"((?P<year>\d{4})-(?<m>\d\d))", false, {"2024-01"}, {"2024-1", "224-01"}},
      {R"(x{)", false, {"x{"}, {"x"}},
      {R"([é-ë]+\u2603)", false, {"éê☃"}, {"e☃", "é"}},
  };
}

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_CONSTRAINTS_REGEX_CASES_H_
