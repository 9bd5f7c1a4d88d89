#include "server/sessions/session_history.h"

#include <algorithm>

namespace linserve {

SessionHistory::SessionHistory(int64_t num_tokens, std::vector<TokenId> pending,
                               absl::Span<const std::pair<TokenId, int64_t>> counts)
    : pending_(std::move(pending)),
      counts_(counts.begin(), counts.end()),
      num_tokens_(num_tokens) {}

std::vector<TokenCount> SessionHistory::SeenCounts() const {
  std::vector<TokenCount> out;
  out.reserve(counts_.size());
  for (const auto& [token, count] : counts_) out.push_back({token, count});
  return out;
}

std::vector<std::pair<TokenId, int64_t>> SessionHistory::SortedCounts() const {
  std::vector<std::pair<TokenId, int64_t>> out(counts_.begin(), counts_.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<TokenId> SessionHistory::TakePending() {
  std::vector<TokenId> out = std::move(pending_);
  pending_.clear();
  return out;
}

void SessionHistory::Append(absl::Span<const TokenId> tokens) {
  for (TokenId token : tokens) ++counts_[token];
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

}  // namespace linserve
