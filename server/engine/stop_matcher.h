// StopMatcher: finds stop strings in streamed text, holding back only the text that could still
// turn out to be the start of one, so that a client never receives any part of a stop string.
#ifndef LINSERVE_SERVER_ENGINE_STOP_MATCHER_H_
#define LINSERVE_SERVER_ENGINE_STOP_MATCHER_H_

#include <string>
#include <string_view>
#include <vector>

namespace linserve {

// Not thread-safe; one per generation stream.
class StopMatcher {
 public:
  // `stops`: non-empty strings (an empty list makes Push an identity).
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` and returns the text that is now final. Once a stop string appears, returns
  // only the text before its first occurrence and sets matched(); later calls return "".
  // Whole UTF-8 characters in give whole characters out: a stop string begins on a character
  // boundary, so any held-back suffix does too.
  std::string Push(std::string_view text);

  bool matched() const { return matched_; }

  // The held-back text (final once no more text will come); empty after a match.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_STOP_MATCHER_H_
