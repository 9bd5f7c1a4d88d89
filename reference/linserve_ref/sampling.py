"""The sampler of model/backend/sampler.h, step for step, so that the reference picks the same tokens.

Every quantity is a Python float (an IEEE double) computed in the order model/backend/sampler.cc uses,
the parameters are first rounded to float32 as SamplingParams stores them, exp is the C
library's (math.exp), and the random stream is std::mt19937_64 seeded with the standard
init_genrand64, converted to a double as u = (rng() >> 11) · 2^-53.
"""

import math
import struct

_MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64 (Matsumoto & Nishimura's MT19937-64, as in C++11 [rand.predef])."""

    _NN, _MM = 312, 156
    _MATRIX_A = 0xB5026F5AA96619E9
    _UPPER, _LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed=5489):
        mt = [seed & _MASK64]
        for i in range(1, self._NN):
            mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & _MASK64)
        self._mt = mt
        self._index = self._NN

    def _twist(self):
        mt, nn, mm = self._mt, self._NN, self._MM
        for i in range(nn):
            x = (mt[i] & self._UPPER) | (mt[(i + 1) % nn] & self._LOWER)
            mt[i] = mt[(i + mm) % nn] ^ (x >> 1) ^ (self._MATRIX_A if x & 1 else 0)
        self._index = 0

    def __call__(self):
        if self._index >= self._NN:
            self._twist()
        x = self._mt[self._index]
        self._index += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & _MASK64


def _f32(x):
    """x rounded to float32, as a double (SamplingParams stores floats)."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


class SamplingParams:
    """model/backend/sampler.h's SamplingParams; validate() mirrors ValidateSamplingParams."""

    def __init__(self, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                 presence_penalty=0.0, frequency_penalty=0.0, seed=0, logit_bias=()):
        self.temperature = _f32(temperature)
        self.top_k = int(top_k)
        self.top_p = _f32(top_p)
        self.min_p = _f32(min_p)
        self.repetition_penalty = _f32(repetition_penalty)
        self.presence_penalty = _f32(presence_penalty)
        self.frequency_penalty = _f32(frequency_penalty)
        self.seed = int(seed) & _MASK64
        # (token, bias) pairs, the bias rounded to float32 (LogitBias::bias).
        self.logit_bias = [(int(t), _f32(b)) for t, b in logit_bias]

    def validate(self):
        def check(ok, field, value, allowed):
            if not ok:
                raise ValueError(f"{field} = {value} is outside {allowed}")

        check(self.temperature >= 0 and math.isfinite(self.temperature), "temperature",
              self.temperature, "[0, inf) (0 = greedy)")
        check(0 <= self.top_k <= 2 ** 31 - 1, "top_k", self.top_k, "[0, 2147483647] (0 = off)")
        check(0 < self.top_p <= 1, "top_p", self.top_p, "(0, 1] (1 = off)")
        check(0 <= self.min_p <= 1, "min_p", self.min_p, "[0, 1] (0 = off)")
        check(self.repetition_penalty > 0 and math.isfinite(self.repetition_penalty),
              "repetition_penalty", self.repetition_penalty, "(0, inf) (1 = off)")
        check(-2 <= self.presence_penalty <= 2, "presence_penalty", self.presence_penalty,
              "[-2, 2] (0 = off)")
        check(-2 <= self.frequency_penalty <= 2, "frequency_penalty", self.frequency_penalty,
              "[-2, 2] (0 = off)")
        if len(self.logit_bias) > 300:
            raise ValueError(f"logit_bias: {len(self.logit_bias)} entries exceed the limit of 300")
        tokens = [t for t, _ in self.logit_bias]
        if any(t < 0 for t in tokens) or len(set(tokens)) != len(tokens):
            raise ValueError("logit_bias: tokens must be distinct ids >= 0")
        for t, b in self.logit_bias:
            check(-100 <= b <= 100, f"logit_bias: the bias of token {t}", b, "[-100, 100]")


def token_allowed(mask, token):
    """Whether the token mask (uint32 words) allows `token`."""
    return (mask[token >> 5] >> (token & 31)) & 1 == 1


class Sampler:
    """One per generation stream, like linserve::Sampler."""

    def __init__(self, params):
        params.validate()
        self.params = params
        self.rng = MT19937_64(params.seed)
        self.seen_counts = {}

    def observe(self, tokens):
        for t in tokens:
            self.seen_counts[int(t)] = self.seen_counts.get(int(t), 0) + 1

    def sample(self, logits, allowed_tokens=None):
        """logits: vocab_size float32 values (any sequence of floats); allowed_tokens: None (every
        token) or a token mask, ceil(vocab_size / 32) uint32 words, bit t % 32 of word t // 32
        set = token t may be picked (bits past the vocabulary ignored). Returns a token id."""
        p = self.params
        l = [float(x) for x in logits]
        vocab = len(l)

        # 0. The mask: disallowed tokens get -inf and stay out of every step.
        allowed = [allowed_tokens is None or token_allowed(allowed_tokens, i) for i in range(vocab)]
        for i in range(vocab):
            if not allowed[i]:
                l[i] = -math.inf

        # 1. Biases, then penalties.
        for t, b in p.logit_bias:
            if 0 <= t < vocab:
                l[t] += b
        r, presence, frequency = p.repetition_penalty, p.presence_penalty, p.frequency_penalty
        for t, c in self.seen_counts.items():
            if t < 0 or t >= vocab:
                continue
            lt = l[t]
            lt = lt / r if lt > 0 else lt * r
            lt -= presence * (1.0 if c > 0 else 0.0) + frequency * float(c)
            l[t] = lt

        if p.temperature == 0.0:
            # 2. Greedy: the first maximum among the allowed tokens.
            best = -1
            for i in range(vocab):
                if allowed[i] and (best < 0 or l[i] > l[best]):
                    best = i
            chosen = max(best, 0)
        else:
            chosen = self._draw(l, [i for i in range(vocab) if allowed[i]])
        self.seen_counts[chosen] = self.seen_counts.get(chosen, 0) + 1
        return chosen

    def _draw(self, l, order):
        """order: the allowed ids, ascending."""
        p = self.params
        # 3. Temperature.
        l = [x / p.temperature for x in l]
        # 4. top_k over the allowed tokens by (l desc, id asc); survivors in ascending id order.
        if 0 < p.top_k < len(order):
            order = sorted(sorted(order, key=lambda i: (-l[i], i))[:p.top_k])
        # 5. Softmax over the survivors.
        max_l = -math.inf
        for i in order:
            max_l = max(max_l, l[i])
        total = 0.0
        for i in order:
            l[i] = math.exp(l[i] - max_l)
            total += l[i]
        for i in order:
            l[i] /= total
        # 6. min_p.
        if p.min_p > 0.0:
            max_p = 0.0
            for i in order:
                max_p = max(max_p, l[i])
            threshold = p.min_p * max_p
            order = [i for i in order if l[i] >= threshold]

        def renormalise():
            s = 0.0
            for i in order:
                s += l[i]
            for i in order:
                l[i] /= s

        # 7. top_p: the shortest (p desc, id asc) prefix whose sum reaches top_p.
        if p.top_p < 1.0:
            renormalise()
            ranked = sorted(order, key=lambda i: (-l[i], i))
            keep = len(ranked)
            cumulative = 0.0
            for n, i in enumerate(ranked):
                cumulative += l[i]
                if cumulative >= p.top_p:
                    keep = n + 1
                    break
            order = sorted(ranked[:keep])
        # 8. Draw.
        renormalise()
        u = (self.rng() >> 11) * 2.0 ** -53
        chosen = order[-1] if order else 0
        cumulative = 0.0
        for i in order:
            cumulative += l[i]
            if cumulative > u:
                return i
        return chosen
