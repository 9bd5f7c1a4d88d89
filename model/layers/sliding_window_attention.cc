#include "model/layers/sliding_window_attention.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

absl::Status Check(const ParamValues& values, ParamErrorFn error) {
  const SlidingWindowAttentionParams p = SlidingWindowAttentionParams::From(values);
  if (p.rotary_dim > p.head_dim) {
    return error("rotary_dim", absl::StrCat("must be at most head_dim (", p.head_dim, "), got ",
                                            p.rotary_dim));
  }
  if (p.rotary_dim % 2 != 0) {
    return error("rotary_dim",
                 absl::StrCat("must be even (RoPE rotates pairs of dims), got ", p.rotary_dim));
  }
  return absl::OkStatus();
}

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const SlidingWindowAttentionParams p = SlidingWindowAttentionParams::From(values);
  const int64_t hd = int64_t{p.n_heads} * p.head_dim;
  std::vector<TensorDecl> t = {
      {"attn.q_proj.weight", {hd, d}, /*projection=*/true}, {"attn.q_proj.bias", {hd}},
      {"attn.k_proj.weight", {hd, d}, /*projection=*/true}, {"attn.k_proj.bias", {hd}},
      {"attn.v_proj.weight", {hd, d}, /*projection=*/true}, {"attn.v_proj.bias", {hd}},
      {"attn.o_proj.weight", {d, hd}, /*projection=*/true}, {"attn.o_proj.bias", {d}},
  };
  if (!p.bias) {
    std::erase_if(t, [](const TensorDecl& decl) { return decl.name.ends_with(".bias"); });
  }
  return t;
}

int64_t StateFloats(const ParamValues& values) {
  return SlidingWindowAttentionParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const SlidingWindowAttentionParams p = SlidingWindowAttentionParams::From(values);
  if (index == p.CountOffset()) return "count";
  if (index == p.CountOffset() + 1) return "next";
  const int64_t entry = index / p.EntryFloats();
  const int64_t in_entry = index % p.EntryFloats();
  const int64_t head = in_entry / (2 * int64_t{p.head_dim});
  const int64_t in_head = in_entry % (2 * int64_t{p.head_dim});
  return absl::StrCat("ring ", entry, ", head ", head, ", ",
                      in_head < p.head_dim ? absl::StrCat("k[", in_head, "]")
                                           : absl::StrCat("v[", in_head - p.head_dim, "]"));
}

// The counters must be indices the step can use: count in [0, R], next in [0, R − 1] (0 when
// R = 0), and, because the ring fills in order from entry 0, next == count until it is full.
std::optional<StateProblem> CheckState(const ParamValues& values, absl::Span<const float> slice,
                                       float max_magnitude) {
  const SlidingWindowAttentionParams p = SlidingWindowAttentionParams::From(values);
  for (size_t i = 0; i < slice.size(); ++i) {
    if (std::optional<std::string> bad = CheckStateValue(slice[i], max_magnitude)) {
      return StateProblem{static_cast<int64_t>(i), *std::move(bad)};
    }
  }
  const int64_t ring = p.RingEntries();
  const int64_t count_index = p.CountOffset();
  const float count = slice[static_cast<size_t>(count_index)];
  const float next = slice[static_cast<size_t>(count_index + 1)];
  if (count != std::floor(count) || count < 0 || count > static_cast<float>(ring)) {
    return StateProblem{count_index,
                        absl::StrCat(count, " is not a whole number of ring entries in [0, ",
                                     ring, "]")};
  }
  const int64_t last = ring == 0 ? 0 : ring - 1;
  if (next != std::floor(next) || next < 0 || next > static_cast<float>(last)) {
    return StateProblem{count_index + 1,
                        absl::StrCat(next, " is not a ring entry index in [0, ", last, "]")};
  }
  if (count < static_cast<float>(ring) && next != count) {
    return StateProblem{count_index + 1,
                        absl::StrCat(next, " differs from count (", count,
                                     ") while the ring is not full (it fills in order)")};
  }
  return std::nullopt;
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "sliding_window_attention";
  k.doc = "causal softmax attention over the last window tokens with RoPE on q and k";
  k.params = {
      IntParam("n_heads", 1, 1024, "attention heads"),
      IntParam("head_dim", 1, 4096, "width of each head's q, k and v"),
      IntParam("window", 1, 65536, "tokens a query sees, itself included"),
      IntParam("rotary_dim", 0, 4096,
               "leading dims of each q and k head that RoPE rotates; even, at most head_dim",
               /*default_from=*/"head_dim"),
      NumberParam("rope_base", 0, 1e9, /*min_exclusive=*/true, 10000,
                  "RoPE base: dims i and i + rotary_dim/2 turn by position · base^(−2i/rotary_dim)"),
      BoolParam("bias", false, "biases on the q, k, v and o projections"),
  };
  k.check = Check;
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout =
      "a ring of window − 1 entries, each per head k (before RoPE) then v (head_dim each); then "
      "count and next";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  return k;
}

}  // namespace

SlidingWindowAttentionParams SlidingWindowAttentionParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_dim = static_cast<int32_t>(v.Int("head_dim")),
          .window = static_cast<int32_t>(v.Int("window")),
          .rotary_dim = static_cast<int32_t>(v.Int("rotary_dim")),
          .rope_base = v.Number("rope_base"),
          .bias = v.Bool("bias")};
}

ParamValues SlidingWindowAttentionParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_dim", int64_t{head_dim});
  v.Set("window", int64_t{window});
  v.Set("rotary_dim", int64_t{rotary_dim});
  v.Set("rope_base", rope_base);
  v.Set("bias", bias);
  return v;
}

int64_t SlidingWindowAttentionParams::RingEntries() const { return int64_t{window} - 1; }

int64_t SlidingWindowAttentionParams::EntryFloats() const {
  return int64_t{n_heads} * 2 * head_dim;
}

int64_t SlidingWindowAttentionParams::CountOffset() const { return RingEntries() * EntryFloats(); }

int64_t SlidingWindowAttentionParams::StateFloats() const { return CountOffset() + 2; }

const MixerKind& SlidingWindowAttentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
