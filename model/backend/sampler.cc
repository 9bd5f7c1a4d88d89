// The algorithm is the one written in sampler.h, step for step, because a Python mirror
// (reference/linserve_ref/sampling.py) must reproduce its tokens exactly: every quantity is
// a double computed in a fixed order, and no std:: distribution is used.
#include "model/backend/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/backend/token_mask.h"

namespace linserve {
namespace {

absl::Status OutOfRange(absl::string_view field, double value, absl::string_view range) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = ", value, " is outside ", range));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  // Written as !(in range) so that NaN fails every check.
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature))) {
    return OutOfRange("temperature", p.temperature, "[0, inf) (0 = greedy)");
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k = ", p.top_k, " is outside [0, 2147483647] (0 = off)"));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return OutOfRange("top_p", p.top_p, "(0, 1] (1 = off)");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return OutOfRange("min_p", p.min_p, "[0, 1] (0 = off)");
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return OutOfRange("repetition_penalty", p.repetition_penalty, "(0, inf) (1 = off)");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", p.presence_penalty, "[-2, 2] (0 = off)");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", p.frequency_penalty, "[-2, 2] (0 = off)");
  }
  return ValidateLogitBias(p.logit_bias);
}

absl::Status ValidateLogitBias(absl::Span<const LogitBias> logit_bias) {
  if (logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias: ", logit_bias.size(),
                                                   " entries exceed the limit of ", kMaxLogitBias));
  }
  std::vector<TokenId> tokens;
  tokens.reserve(logit_bias.size());
  for (const LogitBias& entry : logit_bias) {
    if (entry.token < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token ", entry.token, " is not a token id (>= 0)"));
    }
    if (!(entry.bias >= -kMaxAbsLogitBias && entry.bias <= kMaxAbsLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: the bias of token ", entry.token,
                                                     " = ", entry.bias, " is outside [-",
                                                     kMaxAbsLogitBias, ", ", kMaxAbsLogitBias,
                                                     "]"));
    }
    tokens.push_back(entry.token);
  }
  std::sort(tokens.begin(), tokens.end());
  if (auto twice = std::adjacent_find(tokens.begin(), tokens.end()); twice != tokens.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias: token ", *twice, " is biased twice"));
  }
  return absl::OkStatus();
}

absl::Status CheckLogitBiasVocabulary(absl::Span<const LogitBias> logit_bias, int32_t vocab_size) {
  for (const LogitBias& entry : logit_bias) {
    if (entry.token < 0 || entry.token >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: token ", entry.token,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::Restart(const SamplingParams& params) {
  params_ = params;
  rng_.seed(params.seed);
}

void Sampler::Observe(absl::Span<const TokenId> tokens) {
  for (TokenId t : tokens) ++seen_counts_[t];
}

void Sampler::SetSeen(absl::Span<const TokenCount> counts) {
  seen_counts_.clear();
  for (const TokenCount& c : counts) {
    if (c.count > 0) seen_counts_[c.token] += c.count;
  }
}

TokenId Sampler::Sample(absl::Span<const float> logits, const uint32_t* allowed_tokens,
                        SamplerScratch& scratch) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<double>& l = scratch.values;
  std::vector<int32_t>& order = scratch.order;
  std::vector<int32_t>& ranked = scratch.ranked;
  l.assign(logits.begin(), logits.end());

  // 0. The mask: disallowed tokens get -inf and stay out of every step.
  if (allowed_tokens != nullptr) {
    for (int32_t i = 0; i < vocab; ++i) {
      if (!TokenAllowed(allowed_tokens, i)) l[i] = -std::numeric_limits<double>::infinity();
    }
  }

  // 1. Biases, then penalties on every seen token.
  for (const LogitBias& entry : params_.logit_bias) {
    if (entry.token >= 0 && entry.token < vocab) l[entry.token] += entry.bias;
  }
  const double r = params_.repetition_penalty;
  const double presence = params_.presence_penalty;
  const double frequency = params_.frequency_penalty;
  for (const auto& [t, c] : seen_counts_) {
    if (t < 0 || t >= vocab) continue;
    double& lt = l[t];
    lt = lt > 0 ? lt / r : lt * r;
    lt -= presence * (c > 0 ? 1.0 : 0.0) + frequency * static_cast<double>(c);
  }

  TokenId chosen = 0;
  if (params_.temperature == 0.0f) {
    // 2. Greedy: the first maximum among the allowed tokens.
    TokenId best = -1;
    for (int32_t i = 0; i < vocab; ++i) {
      if (TokenAllowed(allowed_tokens, i) && (best < 0 || l[i] > l[best])) best = i;
    }
    // No token allowed (a mask the caller should have refused): token 0, as for NaN logits.
    chosen = best < 0 ? 0 : best;
  } else {
    // 3. Temperature.
    const double temperature = params_.temperature;
    for (double& x : l) x /= temperature;

    // 4. top_k over the allowed tokens, by (l desc, id asc); survivors are then kept in
    // ascending id order.
    if (allowed_tokens == nullptr) {
      order.resize(static_cast<size_t>(vocab));
      for (int32_t i = 0; i < vocab; ++i) order[i] = i;
    } else {
      order.clear();
      for (int32_t i = 0; i < vocab; ++i) {
        if (TokenAllowed(allowed_tokens, i)) order.push_back(i);
      }
    }
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < order.size()) {
      auto by_logit = [&l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
      std::nth_element(order.begin(), order.begin() + params_.top_k, order.end(), by_logit);
      order.resize(static_cast<size_t>(params_.top_k));
      std::sort(order.begin(), order.end());
    }

    // 5. Softmax over the survivors; l becomes p in place.
    double max_l = -std::numeric_limits<double>::infinity();
    for (int32_t i : order) max_l = std::max(max_l, l[i]);
    double sum = 0.0;
    for (int32_t i : order) {
      l[i] = std::exp(l[i] - max_l);
      sum += l[i];
    }
    for (int32_t i : order) l[i] /= sum;

    // 6. min_p relative to the most likely survivor.
    if (params_.min_p > 0.0f) {
      double max_p = 0.0;
      for (int32_t i : order) max_p = std::max(max_p, l[i]);
      const double threshold = static_cast<double>(params_.min_p) * max_p;
      std::erase_if(order, [&l, threshold](int32_t i) { return !(l[i] >= threshold); });
    }

    auto renormalise = [&order, &l]() {
      double total = 0.0;
      for (int32_t i : order) total += l[i];
      for (int32_t i : order) l[i] /= total;
    };

    // 7. top_p: the shortest (p desc, id asc) prefix reaching top_p. Sorting is done in
    // growing partial sorts because the prefix is usually a small part of the vocabulary.
    if (params_.top_p < 1.0f) {
      renormalise();
      const double top_p = params_.top_p;
      ranked = order;
      auto by_prob = [&l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
      const size_t n = ranked.size();
      size_t sorted = std::min<size_t>(64, n);
      size_t keep = n;
      for (;;) {
        std::partial_sort(ranked.begin(), ranked.begin() + sorted, ranked.end(), by_prob);
        double cumulative = 0.0;
        size_t i = 0;
        for (; i < sorted; ++i) {
          cumulative += l[ranked[i]];
          if (cumulative >= top_p) break;
        }
        if (i < sorted) {
          keep = i + 1;
          break;
        }
        if (sorted == n) break;  // rounding never reached top_p: keep everything
        sorted = std::min(n, sorted * 4);
      }
      ranked.resize(keep);
      std::sort(ranked.begin(), ranked.end());
      order.swap(ranked);
    }

    // 8. Draw.
    renormalise();
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    // Survivors only run out when the logits are not finite (NaN compares false everywhere).
    chosen = order.empty() ? 0 : order.back();
    double cumulative = 0.0;
    for (int32_t i : order) {
      cumulative += l[i];
      if (cumulative > u) {
        chosen = i;
        break;
      }
    }
  }
  ++seen_counts_[chosen];
  return chosen;
}

namespace {

// log Σ exp(logits) over the allowed tokens, in double.
double LogPartition(absl::Span<const float> logits, const uint32_t* allowed_tokens) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  double max_l = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < vocab; ++i) {
    if (TokenAllowed(allowed_tokens, i)) max_l = std::max(max_l, static_cast<double>(logits[i]));
  }
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) {
    if (TokenAllowed(allowed_tokens, i)) sum += std::exp(static_cast<double>(logits[i]) - max_l);
  }
  return max_l + std::log(sum);
}

// Token t's logit in the masked distribution.
double MaskedLogit(absl::Span<const float> logits, const uint32_t* allowed_tokens, int32_t t) {
  return TokenAllowed(allowed_tokens, t) ? static_cast<double>(logits[t])
                                         : -std::numeric_limits<double>::infinity();
}

// TopLogprobsInto with the log partition given.
void TopLogprobsWith(absl::Span<const float> logits, int32_t n, const uint32_t* allowed_tokens,
                     double log_z, std::vector<int32_t>& ids, TokenLogprob* out) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  ids.resize(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&logits, allowed_tokens](int32_t a, int32_t b) {
                      const double la = MaskedLogit(logits, allowed_tokens, a);
                      const double lb = MaskedLogit(logits, allowed_tokens, b);
                      return la > lb || (la == lb && a < b);
                    });
  for (int32_t i = 0; i < n; ++i) {
    out[i] = {ids[i], static_cast<float>(MaskedLogit(logits, allowed_tokens, ids[i]) - log_z)};
  }
}

}  // namespace

void TopLogprobsInto(absl::Span<const float> logits, int32_t n, const uint32_t* allowed_tokens,
                     std::vector<int32_t>& ids, TokenLogprob* out) {
  n = std::clamp(n, 0, static_cast<int32_t>(logits.size()));
  if (n == 0) return;
  TopLogprobsWith(logits, n, allowed_tokens, LogPartition(logits, allowed_tokens), ids, out);
}

float ScoreInto(absl::Span<const float> logits, TokenId token, int32_t n,
                std::vector<int32_t>& ids, TokenLogprob* out) {
  const double log_z = LogPartition(logits, nullptr);
  n = std::clamp(n, 0, static_cast<int32_t>(logits.size()));
  if (n > 0) TopLogprobsWith(logits, n, nullptr, log_z, ids, out);
  return static_cast<float>(static_cast<double>(logits[token]) - log_z);
}

std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, int32_t n,
                                      const uint32_t* allowed_tokens) {
  n = std::clamp(n, 0, static_cast<int32_t>(logits.size()));
  std::vector<TokenLogprob> out(static_cast<size_t>(n));
  std::vector<int32_t> ids;
  TopLogprobsInto(logits, n, allowed_tokens, ids, out.data());
  return out;
}

float LogProbOf(absl::Span<const float> logits, TokenId token, const uint32_t* allowed_tokens) {
  return static_cast<float>(MaskedLogit(logits, allowed_tokens, token) -
                            LogPartition(logits, allowed_tokens));
}

}  // namespace linserve
