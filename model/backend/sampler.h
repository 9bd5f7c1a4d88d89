// Sampler: picks the next token from one session's logits. Deterministic for a given seed: the
// same (seed, logits sequence) gives the same tokens whatever batch the logits came from, on any
// machine (the random stream is std::mt19937_64, converted to a double by hand, never through a
// std:: distribution whose output differs between standard libraries).
//
// The exact algorithm (reference/linserve_ref/sampling.py mirrors it step for step):
//  0. With a token mask (model/backend/token_mask.h; structured output), the allowed set A is
//     the tokens it allows, otherwise the whole vocabulary; every step below works on A only
//     (a token outside A has logit -inf and is never picked).
//  1. l = logits as double, plus each logit_bias entry's bias on its token (a token outside A
//     stays -inf: a bias never lets the mask's refused tokens through). For every seen token t
//     (prompt + generated, counted c_t times): repetition: l_t = l_t > 0 ? l_t / r : l_t * r;
//     then l_t -= presence·[c_t > 0] + frequency·c_t.
//  2. temperature == 0: return argmax l over A (lowest id on ties). No random number is drawn.
//  3. l /= temperature.
//  4. top_k > 0: order A by (l desc, id asc), keep the first min(k, |A|).
//  5. p = softmax over the survivors (max subtracted, in double).
//  6. min_p > 0: keep p_t >= min_p · max p.
//  7. top_p < 1: renormalise, order by (p desc, id asc), keep the shortest prefix whose
//     cumulative sum >= top_p.
//  8. Renormalise; u = (rng() >> 11) · 2^-53; walk the survivors in ascending id order and return
//     the first whose cumulative probability exceeds u (the last survivor if rounding leaves none).
//  Exactly one rng() draw per non-greedy Sample call. Every sum (softmax denominators,
//  renormalisations, the walk of step 8) runs sequentially in ascending id order; the cumulative
//  sum of step 7 runs in that step's (p desc, id asc) order. Seen and biased ids outside
//  [0, vocab) are ignored (the backends refuse biased ones at StartSampling).
#ifndef LINSERVE_MODEL_BACKEND_SAMPLER_H_
#define LINSERVE_MODEL_BACKEND_SAMPLER_H_

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/types.h"

namespace linserve {

// A bias added to one token's logit before it is picked (OpenAI's logit_bias).
struct LogitBias {
  TokenId token = 0;
  float bias = 0.0f;
};

// Most logit_bias entries a SamplingParams may carry (OpenAI's limit).
inline constexpr int32_t kMaxLogitBias = 300;
// Largest |bias|: -100 bans a token and +100 forces it in practice, as OpenAI documents.
inline constexpr float kMaxAbsLogitBias = 100.0f;

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
  // Biases added to the logits of the tokens they name (step 1), at most kMaxLogitBias of them,
  // distinct tokens >= 0 (the backends refuse ids outside the vocabulary), each bias in
  // [-kMaxAbsLogitBias, kMaxAbsLogitBias]. Logprobs never include them (they are of the raw
  // logits, as for the penalties). Default: none.
  std::vector<LogitBias> logit_bias;
};

// Checks every field; errors name the field and its allowed range.
absl::Status ValidateSamplingParams(const SamplingParams& params);
// The logit_bias part of it: the count, each token >= 0 and named once, each bias's range.
absl::Status ValidateLogitBias(absl::Span<const LogitBias> logit_bias);
// Every biased token is in [0, vocab_size); the error names the first that is not.
absl::Status CheckLogitBiasVocabulary(absl::Span<const LogitBias> logit_bias, int32_t vocab_size);

// The top-n (token, log-probability) pairs of the temperature-free distribution.
struct TokenLogprob {
  TokenId token;
  float logprob;
};

// How many times a token was seen (penalty counts).
struct TokenCount {
  TokenId token = 0;
  int64_t count = 0;
};

// Working memory of Sample, reusable by any number of Samplers on one thread at a time (about
// 16 bytes per vocabulary entry once grown).
struct SamplerScratch {
  std::vector<double> values;    // l, then p, indexed by token id
  std::vector<int32_t> order;    // surviving ids, ascending
  std::vector<int32_t> ranked;   // survivors by (p desc, id asc), for top_p
};

// One per generation stream. Not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // New parameters and a random stream seeded with params.seed; the seen counts are kept.
  void Restart(const SamplingParams& params);
  // Counts `tokens` as seen for the penalties (the prompt, typically).
  void Observe(absl::Span<const TokenId> tokens);
  // Replaces the seen counts.
  void SetSeen(absl::Span<const TokenCount> counts);
  // Samples one token from `logits` (vocab_size floats, not modified) among those
  // `allowed_tokens` allows (a token mask over logits.size() tokens allowing at least one;
  // nullptr = all) and counts it as seen.
  TokenId Sample(absl::Span<const float> logits, const uint32_t* allowed_tokens = nullptr) {
    return Sample(logits, allowed_tokens, scratch_);
  }
  TokenId Sample(absl::Span<const float> logits, const uint32_t* allowed_tokens,
                 SamplerScratch& scratch);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<TokenId, int64_t> seen_counts_;
  SamplerScratch scratch_;  // for Sample(logits) only
};

// The logprobs below are of the masked distribution: softmax(logits) over the tokens
// `allowed_tokens` allows (nullptr = all, as Sample), the others having probability 0.
//
// log-softmax top-n of raw logits (n <= logits.size()), most likely first, ties to the lowest
// id; when the mask allows fewer than n tokens, the rest are the lowest disallowed ids with
// logprob -inf.
std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, int32_t n,
                                      const uint32_t* allowed_tokens = nullptr);
// Writes the same n pairs to out[0, n) without allocating when `ids` has grown to
// logits.size() (a scratch vector the caller keeps).
void TopLogprobsInto(absl::Span<const float> logits, int32_t n, const uint32_t* allowed_tokens,
                     std::vector<int32_t>& ids, TokenLogprob* out);
// LogProbOf(logits, token) (no mask), and TopLogprobsInto(logits, n, nullptr, ids, out), with
// the log partition computed once: a prompt position's score.
float ScoreInto(absl::Span<const float> logits, TokenId token, int32_t n,
                std::vector<int32_t>& ids, TokenLogprob* out);
// log p(token) under the masked softmax(logits), in double (-inf for a disallowed token).
float LogProbOf(absl::Span<const float> logits, TokenId token,
                const uint32_t* allowed_tokens = nullptr);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_SAMPLER_H_
