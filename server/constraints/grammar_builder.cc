#include "server/constraints/grammar_builder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace linserve {

absl::Status GbnfError(size_t offset, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("at byte ", offset, ": ", std::string(message)));
}

absl::Status GrammarBuilder::Count(int64_t elements, size_t offset) {
  elements_ += elements;
  if (elements_ > limits_.max_grammar_elements) {
    return GbnfError(offset, absl::StrCat("the grammar exceeds max_grammar_elements (",
                                          limits_.max_grammar_elements,
                                          ") once repetitions and classes are expanded"));
  }
  return absl::OkStatus();
}

int32_t GrammarBuilder::UserRule(std::string_view name, size_t offset) {
  auto [it, inserted] =
      names_.try_emplace(std::string(name), static_cast<int32_t>(rules_.size()));
  if (inserted) {
    Rule rule;
    rule.name = std::string(name);
    rule.owner = it->second;
    rule.offset = offset;
    rules_.push_back(std::move(rule));
  }
  return it->second;
}

absl::Status GrammarBuilder::Define(int32_t rule, size_t offset) {
  if (rules_[rule].defined) {
    return GbnfError(offset, absl::StrCat("rule '", rules_[rule].name, "' is defined twice"));
  }
  rules_[rule].defined = true;
  rules_[rule].offset = offset;
  return absl::OkStatus();
}

int32_t GrammarBuilder::NewRule(int32_t owner) {
  Rule rule;
  rule.name = absl::StrCat(rules_[owner].name, "-", rules_.size());
  rule.owner = owner;
  rule.defined = true;
  rule.offset = rules_[owner].offset;
  rules_.push_back(std::move(rule));
  return static_cast<int32_t>(rules_.size()) - 1;
}

int32_t GrammarBuilder::InternByteSet(const ByteSet& set) {
  auto [it, inserted] =
      byte_set_index_.try_emplace(set.words, static_cast<int32_t>(sets_.size()));
  if (inserted) sets_.push_back(set);
  return it->second;
}

absl::StatusOr<GrammarBuilder::Elem> GrammarBuilder::LowerClass(CodePointRanges ranges,
                                                                int32_t owner, size_t offset) {
  if (auto status = Count(1, offset); !status.ok()) return status;
  if (!ranges.empty() && ranges.back().second < 0x80) {
    ByteSet set;
    for (const auto& [lo, hi] : ranges) {
      set.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    }
    return Elem{Kind::kBytes, InternByteSet(set)};
  }
  auto found = class_rules_.find(ranges);
  if (found != class_rules_.end()) return Elem{Kind::kRule, found->second};
  std::vector<ByteRangeSequence> sequences;
  for (const auto& [lo, hi] : ranges) SplitUtf8(lo, hi, &sequences);
  // Single bytes share one alternative.
  ByteSet single;
  std::vector<Sequence> alternatives;
  int64_t elements = 0;
  for (const auto& sequence : sequences) {
    if (sequence.size() == 1) {
      single.AddRange(sequence[0].first, sequence[0].second);
      continue;
    }
    Sequence alternative;
    for (const auto& [lo, hi] : sequence) {
      ByteSet set;
      set.AddRange(lo, hi);
      alternative.push_back({Kind::kBytes, InternByteSet(set)});
    }
    elements += static_cast<int64_t>(alternative.size());
    alternatives.push_back(std::move(alternative));
  }
  if (!single.empty()) {
    alternatives.insert(alternatives.begin(), Sequence{{Kind::kBytes, InternByteSet(single)}});
    ++elements;
  }
  if (auto status = Count(elements, offset); !status.ok()) return status;
  const int32_t rule = NewRule(owner);
  rules_[rule].name = absl::StrCat("class-", rule);
  rules_[rule].alternatives = std::move(alternatives);
  class_rules_.emplace(std::move(ranges), rule);
  return Elem{Kind::kRule, rule};
}

absl::StatusOr<Grammar> GrammarBuilder::Finish(size_t end) {
  const int32_t n = static_cast<int32_t>(rules_.size());
  for (const Rule& rule : rules_) {
    if (!rule.defined) {
      return GbnfError(rule.offset, absl::StrCat("undefined rule '", rule.name, "'"));
    }
  }
  const auto root = names_.find("root");
  if (root == names_.end()) return GbnfError(end, "no rule 'root'");

  // Productive rules (those that match some finite string), to a fixed point.
  std::vector<bool> productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const Sequence& alternative : rules_[r].alternatives) {
        if (std::all_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
              return e.kind == Kind::kBytes || productive[e.value];
            })) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    if (!productive[r] && rules_[r].owner == r) {
      return GbnfError(rules_[r].offset,
                       absl::StrCat("rule '", rules_[r].name, "' matches no finite string"));
    }
    const auto dead = [&](const Sequence& alternative) {
      return std::any_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
        return e.kind == Kind::kRule && !productive[e.value];
      });
    };
    auto& alternatives = rules_[r].alternatives;
    alternatives.erase(std::remove_if(alternatives.begin(), alternatives.end(), dead),
                       alternatives.end());
  }

  // Nullable rules, to a fixed point; then the rules each can reach before any byte.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alternative : rules_[r].alternatives) {
        if (std::all_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
              return e.kind == Kind::kRule && nullable[e.value];
            })) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> left(n);
  for (int32_t r = 0; r < n; ++r) {
    for (const Sequence& alternative : rules_[r].alternatives) {
      for (const Elem& e : alternative) {
        if (e.kind != Kind::kRule) break;
        left[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  // Depth-first search for a cycle, iterative (a chain of rules may be long).
  std::vector<uint8_t> color(n, 0);  // 0 unvisited, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (int32_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    path.emplace_back(start, 0);
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t to = left[r][next++];
      if (color[to] == 1) {
        const Rule& user = rules_[rules_[to].owner];
        return GbnfError(user.offset,
                         absl::StrCat("rule '", user.name,
                                      "' is left-recursive: it can reach itself before matching "
                                      "any byte (directly, through other rules, or through a "
                                      "repetition of something that can match nothing)"));
      }
      if (color[to] == 0) {
        color[to] = 1;
        path.emplace_back(to, 0);
      }
    }
  }

  LeftFactor();

  Grammar grammar;
  grammar.root_ = root->second;
  grammar.byte_sets_ = std::move(sets_);
  grammar.rule_alternatives_.reserve(rules_.size() + 1);
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Sequence& alternative : rules_[r].alternatives) {
      grammar.alternative_starts_.push_back(static_cast<int32_t>(grammar.elements_.size()));
      for (const Elem& e : alternative) grammar.elements_.push_back({e.kind, e.value});
      grammar.num_elements_ += static_cast<int64_t>(alternative.size());
      grammar.elements_.push_back({Kind::kEnd, 0});
    }
    grammar.rule_alternatives_.push_back(
        static_cast<int32_t>(grammar.alternative_starts_.size()));
    grammar.rule_names_.push_back(std::move(rules_[r].name));
  }
  return grammar;
}

void GrammarBuilder::LeftFactor() {
  const auto less = [](const Sequence& a, const Sequence& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](const Elem& x, const Elem& y) {
                                          return std::pair(x.kind, x.value) <
                                                 std::pair(y.kind, y.value);
                                        });
  };
  const auto same = [](const Elem& x, const Elem& y) {
    return x.kind == y.kind && x.value == y.value;
  };
  const auto equal = [&](const Sequence& a, const Sequence& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), same);
  };
  std::vector<int32_t> work(rules_.size());
  for (size_t r = 0; r < work.size(); ++r) work[r] = static_cast<int32_t>(r);
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    std::vector<Sequence> alternatives = std::move(rules_[r].alternatives);
    std::sort(alternatives.begin(), alternatives.end(), less);
    alternatives.erase(std::unique(alternatives.begin(), alternatives.end(), equal),
                       alternatives.end());
    std::vector<Sequence> factored;
    for (size_t i = 0; i < alternatives.size();) {
      size_t j = i + 1;
      while (j < alternatives.size() && !alternatives[i].empty() &&
             !alternatives[j].empty() && same(alternatives[j][0], alternatives[i][0])) {
        ++j;
      }
      if (j - i == 1) {
        factored.push_back(std::move(alternatives[i]));
        i = j;
        continue;
      }
      // Sorted: the first and the last of the run share what they all share.
      const Sequence& first = alternatives[i];
      const Sequence& last = alternatives[j - 1];
      size_t shared = 0;
      while (shared < first.size() && shared < last.size() &&
             same(first[shared], last[shared])) {
        ++shared;
      }
      const int32_t rests = NewRule(rules_[r].owner);
      for (size_t k = i; k < j; ++k) {
        rules_[rests].alternatives.emplace_back(alternatives[k].begin() + shared,
                                                alternatives[k].end());
      }
      Sequence prefix(first.begin(), first.begin() + shared);
      prefix.push_back({Kind::kRule, rests});
      factored.push_back(std::move(prefix));
      work.push_back(rests);
      i = j;
    }
    rules_[r].alternatives = std::move(factored);
  }
}

}  // namespace linserve
