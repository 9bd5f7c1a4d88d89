#include "server/constraints/grammar_matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/constraints/grammar.h"

namespace linserve {
namespace {

// The first byte of Serialize's output.
constexpr char kFormatVersion = 1;

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledConstraint> constraint)
    : constraint_(std::move(constraint)),
      stacks_(*constraint_->start_),
      stepper_(constraint_->grammar_.get(), constraint_->limits().max_matcher_stacks) {}

const CompiledConstraint& GrammarMatcher::constraint() const { return *constraint_; }

absl::Status GrammarMatcher::FillMask(absl::Span<uint32_t> mask) const {
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  if (static_cast<int32_t>(mask.size()) != vocabulary.mask_words()) {
    return absl::InvalidArgumentError(absl::StrCat("token mask of ", mask.size(),
                                                   " words, expected ", vocabulary.mask_words()));
  }
  std::fill(mask.begin(), mask.end(), 0u);
  if (ended_) return absl::OkStatus();
  key_.clear();
  stacks_.AppendKey(&key_);
  if (constraint_->LookupMask(key_, mask)) return absl::OkStatus();
  if (auto status = WalkTrie(mask); !status.ok()) return status;
  const TokenId eos = vocabulary.eos_token_id();
  if (eos >= 0 && stacks_.can_end()) mask[eos / 32] |= uint32_t{1} << (eos % 32);
  constraint_->StoreMask(key_, mask);
  return absl::OkStatus();
}

int32_t GrammarMatcher::Intern(ParseStacks& stacks) const {
  const size_t hash = stacks.Hash();
  const auto [it, inserted] = walk_.by_hash.try_emplace(hash, walk_.count);
  if (!inserted) {
    for (int32_t id = it->second; id >= 0; id = walk_.next[id]) {
      if (walk_.sets[id] == stacks) return id;
    }
  }
  const int32_t id = walk_.count++;
  if (static_cast<int32_t>(walk_.sets.size()) < walk_.count) walk_.sets.resize(walk_.count);
  if (static_cast<int32_t>(walk_.next.size()) < walk_.count) walk_.next.resize(walk_.count);
  std::swap(walk_.sets[id], stacks);
  walk_.next[id] = inserted ? -1 : it->second;
  it->second = id;
  return id;
}

absl::Status GrammarMatcher::WalkTrie(absl::Span<uint32_t> mask) const {
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  const auto trie = vocabulary.trie();
  walk_.count = 0;
  walk_.by_hash.clear();
  walk_.steps.clear();
  walk_.levels.resize(vocabulary.max_depth() + 1);
  if (scratch_.empty()) scratch_.resize(2);
  scratch_[0] = stacks_;
  walk_.levels[0] = Intern(scratch_[0]);
  // Preorder: when node i is reached, the set of its parent (depth - 1) is the latest one
  // computed at that depth, since a rejected node's subtree is skipped whole.
  const int32_t n = static_cast<int32_t>(trie.size());
  for (int32_t i = 1; i < n;) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const int32_t parent = walk_.levels[node.depth - 1];
    if (!walk_.sets[parent].next_bytes().Contains(node.byte)) {
      i = node.subtree_end;
      continue;
    }
    // Every stack the grammar leads to can complete, so a byte in next_bytes() is accepted.
    for (TokenId token : vocabulary.tokens(node)) mask[token / 32] |= uint32_t{1} << (token % 32);
    if (node.subtree_end != i + 1) {
      const auto [step, inserted] =
          walk_.steps.try_emplace((int64_t{parent} << 8) | node.byte, 0);
      if (inserted) {
        if (auto status = stepper_.Step(walk_.sets[parent], node.byte, &scratch_[0]);
            !status.ok()) {
          return status;
        }
        step->second = Intern(scratch_[0]);
      }
      walk_.levels[node.depth] = step->second;
    }
    ++i;
  }
  return absl::OkStatus();
}

absl::Status GrammarMatcher::Accept(TokenId token) {
  const TokenVocabulary& vocabulary = constraint_->vocabulary();
  if (ended_) return absl::InvalidArgumentError("the constrained document has ended");
  if (token < 0 || token >= vocabulary.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary"));
  }
  if (token == vocabulary.eos_token_id()) {
    if (!stacks_.can_end()) {
      return absl::InvalidArgumentError("eos where the constrained document may not end");
    }
    ended_ = true;
    return absl::OkStatus();
  }
  const std::string_view bytes = vocabulary.bytes(token);
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " stands for no bytes; never allowed under a constraint"));
  }
  if (scratch_.size() < 2) scratch_.resize(2);
  const ParseStacks* current = &stacks_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(bytes[i]);
    if (!current->next_bytes().Contains(byte)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " does not continue the constrained document (byte ", i, ")"));
    }
    ParseStacks* next = &scratch_[i % 2];
    if (auto status = stepper_.Step(*current, byte, next); !status.ok()) return status;
    current = next;
  }
  std::swap(stacks_, scratch_[(bytes.size() - 1) % 2]);
  return absl::OkStatus();
}

bool GrammarMatcher::CanEnd() const { return stacks_.can_end(); }

bool GrammarMatcher::IsComplete() const { return stacks_.can_end() && stacks_.size() == 1; }

bool GrammarMatcher::ended() const { return ended_; }

std::string GrammarMatcher::Serialize() const {
  std::string bytes;
  bytes.push_back(kFormatVersion);
  bytes.push_back(ended_ ? 1 : 0);
  stacks_.Encode(&bytes);
  return bytes;
}

absl::StatusOr<GrammarMatcher> GrammarMatcher::Deserialize(
    std::shared_ptr<const CompiledConstraint> constraint, std::string_view bytes) {
  if (bytes.size() < 2 || bytes[0] != kFormatVersion) {
    return absl::InvalidArgumentError("constraint state: unknown format");
  }
  if (bytes[1] != 0 && bytes[1] != 1) {
    return absl::InvalidArgumentError("constraint state: bad ended flag");
  }
  const bool ended = bytes[1] == 1;
  bytes.remove_prefix(2);
  auto stacks = ParseStacks::Decode(constraint->grammar(),
                                    constraint->limits().max_matcher_stacks, &bytes);
  if (!stacks.ok()) return stacks.status();
  if (!bytes.empty()) return absl::InvalidArgumentError("constraint state: trailing bytes");
  GrammarMatcher matcher(std::move(constraint));
  matcher.stacks_ = *std::move(stacks);
  matcher.ended_ = ended;
  return matcher;
}

}  // namespace linserve
