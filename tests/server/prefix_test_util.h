// Checkpoints for the prefix store's tests: token ranges and recognisable states.
#ifndef LINSERVE_TESTS_SERVER_PREFIX_TEST_UTIL_H_
#define LINSERVE_TESTS_SERVER_PREFIX_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "model/backend/backend.h"
#include "model/types.h"

namespace linserve {

inline constexpr int64_t kPrefixTestFloats = 1000;  // 4000 bytes of state per checkpoint

// The state after `tokens`, tagged so a test can tell checkpoints apart.
inline StateBlob StateAfter(const std::vector<TokenId>& tokens) {
  StateBlob blob;
  blob.position = static_cast<int64_t>(tokens.size());
  blob.state.assign(kPrefixTestFloats, 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i) {
    blob.state[i % kPrefixTestFloats] += tokens[i] + 0.5f * i;
  }
  return blob;
}

inline std::vector<TokenId> Range(TokenId from, int n) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back(from + i);
  return out;
}

inline std::vector<TokenId> Head(const std::vector<TokenId>& tokens, size_t n) {
  return {tokens.begin(), tokens.begin() + n};
}

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_PREFIX_TEST_UTIL_H_
