// The "sliding_window_attention" mixer (Based's SlidingAttention; docs/architecture.md §4.6):
// causal softmax attention over the last `window` tokens, the query's own included, with rotary
// position embeddings (GPT-NeoX / flash-attn non-interleaved) on the first rotary_dim dims of
// each q and k head:
//   q, k, v = x Wq (+ bq), x Wk (+ bk), x Wv (+ bv)        split into n_heads × head_dim
//   per head: o_t = Σ_{t−window < s ≤ t} softmax_s(RoPE_t(q_t) · RoPE_s(k_s) / √head_dim) v_s
//   out = concat_heads(o_t) Wo (+ bo)
// RoPE_t(q) · RoPE_s(k) = q · RoPE_{s−t}(k): a score depends only on the distance t − s, so the
// state holds keys before RoPE and a step rotates each by its distance.
//
// Its state slice: a ring of R = window − 1 past tokens, then two counters:
//   ring entry r (r < R), head h: k before RoPE [head_dim] then v [head_dim], at
//   (r · n_heads + h) · 2 · head_dim;
//   count (how many entries hold a token, 0 … R) and next (the entry the next token goes to,
//   0 … R − 1; 0 when R = 0), as floats.
// A step attends over the `count` stored tokens and the current one, then writes the current
// (k, v) into entry next, next = (next + 1) mod R, count = min(count + 1, R).
#ifndef LINSERVE_MODEL_LAYERS_SLIDING_WINDOW_ATTENTION_H_
#define LINSERVE_MODEL_LAYERS_SLIDING_WINDOW_ATTENTION_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

// The parameters of one sliding_window_attention mixer, typed.
struct SlidingWindowAttentionParams {
  int32_t n_heads = 0;   // [1, 1024]; required
  int32_t head_dim = 0;  // [1, 4096]; required
  int32_t window = 0;    // [1, 65536]: tokens a query sees, itself included; required
  // Leading dims of each q and k head that RoPE rotates: even, in [0, head_dim].
  // Default: head_dim.
  int32_t rotary_dim = 0;
  double rope_base = 10000;  // (0, 1e9]. Default: 10000
  bool bias = false;         // biases on q/k/v/o. Default: false

  static SlidingWindowAttentionParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // R = window − 1: the past tokens the ring holds.
  int64_t RingEntries() const;
  // Floats of one ring entry: n_heads · 2 · head_dim.
  int64_t EntryFloats() const;
  // Where count lies in the slice (next follows it): RingEntries() · EntryFloats().
  int64_t CountOffset() const;
  // CountOffset() + 2.
  int64_t StateFloats() const;
};

const MixerKind& SlidingWindowAttentionKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_SLIDING_WINDOW_ATTENTION_H_
