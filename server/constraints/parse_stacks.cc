#include "server/constraints/parse_stacks.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

using Kind = Grammar::ElementKind;

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(0x80 | (value & 0x7F)));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

bool GetVarint(std::string_view* bytes, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (bytes->empty()) return false;
    const uint8_t b = static_cast<uint8_t>(bytes->front());
    bytes->remove_prefix(1);
    *value |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

absl::Status StateError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("constraint state: ", std::string(what)));
}

}  // namespace

void ParseStacks::AppendKey(std::string* key) const {
  // append() copies nothing for an empty vector, whose data() may be null (memcpy's may not).
  key->append(reinterpret_cast<const char*>(begins_.data()), begins_.size() * sizeof(int32_t));
  key->append(reinterpret_cast<const char*>(positions_.data()),
              positions_.size() * sizeof(int32_t));
}

size_t ParseStacks::Hash() const { return absl::HashOf(begins_, positions_); }

void ParseStacks::Encode(std::string* out) const {
  PutVarint(static_cast<uint64_t>(size()), out);
  for (int32_t i = 0; i < size(); ++i) {
    const auto s = stack(i);
    PutVarint(s.size(), out);
    for (int32_t position : s) PutVarint(static_cast<uint64_t>(position), out);
  }
}

absl::StatusOr<ParseStacks> ParseStacks::Decode(const Grammar& grammar, int32_t max_stacks,
                                                std::string_view* bytes) {
  uint64_t count;
  if (!GetVarint(bytes, &count)) return StateError("truncated");
  if (count == 0) return StateError("no parse stacks");
  if (count > static_cast<uint64_t>(max_stacks)) {
    return StateError(absl::StrCat(count, " parse stacks, above max_matcher_stacks (",
                                   max_stacks, ")"));
  }
  ParseStacks stacks;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length;
    // Every position takes at least one byte.
    if (!GetVarint(bytes, &length) || length > bytes->size()) return StateError("truncated");
    for (uint64_t j = 0; j < length; ++j) {
      uint64_t position;
      if (!GetVarint(bytes, &position)) return StateError("truncated");
      if (position >= static_cast<uint64_t>(grammar.num_positions())) {
        return StateError(absl::StrCat("position ", position, " is outside the grammar"));
      }
      const auto p = static_cast<int32_t>(position);
      const Kind kind = grammar.element(p).kind;
      if (j + 1 == length) {
        if (kind != Kind::kBytes) {
          return StateError(absl::StrCat("position ", p, " is not a byte set"));
        }
      } else if (p == 0 || kind == Kind::kEnd || grammar.element(p - 1).kind != Kind::kRule) {
        return StateError(absl::StrCat("position ", p, " does not follow a rule reference"));
      }
      stacks.positions_.push_back(p);
    }
    stacks.begins_.push_back(static_cast<int32_t>(stacks.positions_.size()));
    if (i > 0) {
      const auto previous = stacks.stack(static_cast<int32_t>(i) - 1);
      const auto current = stacks.stack(static_cast<int32_t>(i));
      if (!std::lexicographical_compare(previous.begin(), previous.end(), current.begin(),
                                        current.end())) {
        return StateError("parse stacks out of order");
      }
    }
  }
  stacks.Summarize(grammar);
  return stacks;
}

void ParseStacks::Summarize(const Grammar& grammar) {
  can_end_ = false;
  next_bytes_ = ByteSet();
  for (int32_t i = 0; i < size(); ++i) {
    const auto s = stack(i);
    if (s.empty()) {
      can_end_ = true;
    } else {
      next_bytes_ |= grammar.byte_set(grammar.element(s.back()).value);
    }
  }
}

absl::Status ParseStepper::Start(ParseStacks* out) {
  out->Clear();
  work_ = 0;
  for (int32_t start : grammar_->alternatives(grammar_->root())) {
    current_.assign(1, start);
    if (auto status = Expand(out); !status.ok()) return status;
  }
  return Canonicalize(out);
}

absl::Status ParseStepper::Step(const ParseStacks& in, uint8_t byte, ParseStacks* out) {
  out->Clear();
  work_ = 0;
  for (int32_t i = 0; i < in.size(); ++i) {
    const auto s = in.stack(i);
    if (s.empty()) continue;
    const int32_t top = s.back();
    if (!grammar_->byte_set(grammar_->element(top).value).Contains(byte)) continue;
    current_.assign(s.begin(), s.end());
    current_.back() = top + 1;
    if (auto status = Expand(out); !status.ok()) return status;
  }
  return Canonicalize(out);
}

absl::Status ParseStepper::Expand(ParseStacks* out) {
  const int64_t budget = kWorkPerStack * max_stacks_;
  pending_positions_.clear();
  pending_begins_.assign(1, 0);
  while (true) {
    while (true) {
      if (current_.empty()) {
        out->Append(current_);
        break;
      }
      const int32_t p = current_.back();
      const Grammar::Element& e = grammar_->element(p);
      if (e.kind == Kind::kBytes) {
        out->Append(current_);
        break;
      }
      if (e.kind == Kind::kEnd) {
        current_.pop_back();
        continue;
      }
      const auto alternatives = grammar_->alternatives(e.value);
      work_ += static_cast<int64_t>(alternatives.size());
      if (work_ > budget || out->size() > budget) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the constraint's grammar is too ambiguous here: expanding its parse stacks for one "
            "byte takes more than ",
            budget, " steps (", kWorkPerStack, " x max_matcher_stacks)"));
      }
      if (grammar_->element(p + 1).kind == Kind::kEnd) {
        current_.pop_back();  // a tail call: nothing to return to
      } else {
        current_.back() = p + 1;
      }
      if (alternatives.empty()) break;
      for (size_t j = 1; j < alternatives.size(); ++j) {
        pending_positions_.insert(pending_positions_.end(), current_.begin(), current_.end());
        pending_positions_.push_back(alternatives[j]);
        pending_begins_.push_back(static_cast<int32_t>(pending_positions_.size()));
      }
      current_.push_back(alternatives[0]);
    }
    if (pending_begins_.size() == 1) return absl::OkStatus();
    const int32_t begin = pending_begins_[pending_begins_.size() - 2];
    current_.assign(pending_positions_.begin() + begin, pending_positions_.end());
    pending_positions_.resize(begin);
    pending_begins_.pop_back();
  }
}

absl::Status ParseStepper::Canonicalize(ParseStacks* out) {
  if (out->size() > 1) {
    order_.resize(out->size());
    for (int32_t i = 0; i < out->size(); ++i) order_[i] = i;
    const auto less = [out](int32_t a, int32_t b) {
      const auto x = out->stack(a), y = out->stack(b);
      return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
    };
    std::sort(order_.begin(), order_.end(), less);
    sorted_.Clear();
    for (size_t i = 0; i < order_.size(); ++i) {
      if (i > 0 && out->stack(order_[i]) == out->stack(order_[i - 1])) continue;
      sorted_.Append(out->stack(order_[i]));
    }
    std::swap(*out, sorted_);
  }
  if (out->size() > max_stacks_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the constraint's grammar is too ambiguous here: ", out->size(),
        " parse stacks, above max_matcher_stacks (", max_stacks_, ")"));
  }
  out->Summarize(*grammar_);
  return absl::OkStatus();
}

}  // namespace linserve
