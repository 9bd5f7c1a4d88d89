// Sampler: picks the next token from one session's logits. Deterministic for a given seed: the
// same (seed, logits sequence) gives the same tokens whatever batch the logits came from, on any
// machine (the random stream is our own, not a std:: distribution).
#ifndef LINSERVE_MODEL_SAMPLER_H_
#define LINSERVE_MODEL_SAMPLER_H_

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/types.h"

namespace linserve {

struct SamplingParams {
  // 0 = greedy (argmax, ties to the lowest id); > 0 scales logits. Default: 1.0.
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 = off. Default: 0.
  int32_t top_k = 0;
  // Keep the smallest set whose probability reaches top_p, in (0, 1]. Default: 1.0 (off).
  float top_p = 1.0f;
  // Drop tokens with probability < min_p · p_max, in [0, 1]. Default: 0 (off).
  float min_p = 0.0f;
  // CTRL-style: logits of seen tokens divided (if > 0) or multiplied (if < 0) by this, > 0.
  // Default: 1.0 (off).
  float repetition_penalty = 1.0f;
  // OpenAI-style, subtracted once per seen token / per occurrence, in [-2, 2]. Default: 0.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Seed of the session's random stream. Default: 0.
  uint64_t seed = 0;
};

// Checks every field; errors name the field and its allowed range.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// The top-n (token, log-probability) pairs of the temperature-free distribution.
struct TokenLogprob {
  TokenId token;
  float logprob;
};

// One per generation stream. Not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Counts `tokens` as seen for the penalties (the prompt, typically).
  void Observe(absl::Span<const TokenId> tokens);
  // Samples one token from `logits` (vocab_size floats, not modified) and counts it as seen.
  TokenId Sample(absl::Span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<TokenId, int32_t> seen_counts_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
};

// log-softmax top-n of raw logits (n <= logits.size()), most likely first.
std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, int32_t n);

}  // namespace linserve

#endif  // LINSERVE_MODEL_SAMPLER_H_
