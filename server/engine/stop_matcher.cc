#include "server/engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace linserve {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopMatcher::Push(std::string_view text) {
  if (matched_) return "";
  held_.append(text);
  // Every earlier occurrence start lies inside held_: text that was released could not begin
  // a stop string (it was not a prefix of one when released).
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    first = std::min(first, held_.find(stop));
  }
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest suffix of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace linserve
