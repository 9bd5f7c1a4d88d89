// The sliding_window_attention mixer (model/layers/sliding_window_attention.h) on the CPU: q, k
// and v projected (CpuProjectedMixer), then per session and head, token by token, softmax
// attention over the ring of past keys and values (each key rotated by its distance) and the
// current token, the ring written after; o_proj added to the residual.

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "model/backend/cpu/cpu_projected_mixer.h"
#include "model/layers/sliding_window_attention.h"

namespace linserve {
namespace {

// Where one token's attention in one head reads and writes.
struct HeadStep {
  const float* q;  // head_dim each
  const float* k;
  const float* v;
  float* out;
  float* state;   // the slot's slice
  int64_t head;
  int64_t count;  // ring entries holding a token
  int64_t next;   // the entry the token goes to
};

class CpuSlidingWindowAttention final : public CpuProjectedMixer {
 public:
  CpuSlidingWindowAttention(const CpuLayerContext& context, const SlidingWindowAttentionParams& p,
                            const LayerWeights& w, int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, {"attn.q_proj", "attn.k_proj", "attn.v_proj"},
                          "attn.o_proj"),
        params_(p),
        ring_(p.RingEntries()),
        half_(p.rotary_dim / 2),
        scale_(static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)))) {
    // cos and sin of distance · inv_freq[i] for every distance a query sees, in double.
    cos_.resize(static_cast<size_t>(p.window) * half_);
    sin_.resize(cos_.size());
    for (int64_t distance = 0; distance < p.window; ++distance) {
      for (int64_t i = 0; i < half_; ++i) {
        const double inv_freq =
            std::pow(p.rope_base, -2.0 * static_cast<double>(i) / p.rotary_dim);
        const double angle = static_cast<double>(distance) * inv_freq;
        cos_[static_cast<size_t>(distance * half_ + i)] = static_cast<float>(std::cos(angle));
        sin_[static_cast<size_t>(distance * half_ + i)] = static_cast<float>(std::sin(angle));
      }
    }
    workspace_.Reserve(FirstCoreBuffer(), int64_t{context.threads} * p.window);  // scores
  }

 private:
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    q_ = inputs[0];
    k_ = inputs[1];
    v_ = inputs[2];
    out_ = out;
    if (pass.prefill) {
      Prefill(pass);
    } else {
      Decode(pass);
    }
  }

  // Row `row`'s vectors of head `head`, into a step over `state` with the ring at count, next.
  HeadStep Step(int64_t row, int64_t head, float* state, int64_t count, int64_t next) {
    const int64_t at = row * params_.n_heads * params_.head_dim + head * params_.head_dim;
    return {.q = q_ + at,
            .k = k_ + at,
            .v = v_ + at,
            .out = out_ + at,
            .state = state,
            .head = head,
            .count = count,
            .next = next};
  }

  // One token per row, each of its own slot: every (row, head) on its own, then the counters.
  void Decode(const CpuPass& pass) {
    const int64_t heads = params_.n_heads;
    cpu::ParallelFor(threads_, pass.rows * heads, [&](int64_t task, int participant) {
      const int64_t row = task / heads;
      float* state = State(pass, pass.decode_slots[static_cast<size_t>(row)]);
      const auto [count, next] = Counters(state);
      Attend(Step(row, task % heads, state, count, next), participant);
    });
    for (int row = 0; row < pass.rows; ++row) {
      Advance(State(pass, pass.decode_slots[static_cast<size_t>(row)]), 1);
    }
  }

  // A piece's tokens in order, each a step: the ring holds exactly the window − 1 tokens before
  // it, so this is the chunk's attention over the ring and the chunk's earlier tokens, and leaves
  // the state the token-by-token path leaves. Heads (and pieces) are independent.
  void Prefill(const CpuPass& pass) {
    const int64_t heads = params_.n_heads;
    cpu::ParallelFor(
        threads_, static_cast<int64_t>(pass.pieces.size()) * heads,
        [&](int64_t task, int participant) {
          const PrefillPiece& piece = pass.pieces[static_cast<size_t>(task / heads)];
          const int64_t head = task % heads;
          float* state = State(pass, piece.slot);
          const auto [count, next] = Counters(state);
          for (int64_t r = 0; r < piece.rows; ++r) {
            const int64_t next_r = ring_ == 0 ? 0 : (next + r) % ring_;
            Attend(Step(piece.first_row + r, head, state, std::min(count + r, ring_), next_r),
                   participant);
          }
        });
    for (const PrefillPiece& piece : pass.pieces) Advance(State(pass, piece.slot), piece.rows);
  }

  std::pair<int64_t, int64_t> Counters(const float* state) const {
    const float* counters = state + params_.CountOffset();
    return {static_cast<int64_t>(counters[0]), static_cast<int64_t>(counters[1])};
  }

  // The counters after `tokens` more tokens.
  void Advance(float* state, int64_t tokens) const {
    float* counters = state + params_.CountOffset();
    const auto [count, next] = Counters(state);
    counters[0] = static_cast<float>(std::min(count + tokens, ring_));
    counters[1] = static_cast<float>(ring_ == 0 ? 0 : (next + tokens) % ring_);
  }

  // q · RoPE_{−distance}(key) / √head_dim: the key turned back by its distance.
  float Score(const float* q, const float* key, int64_t distance) const {
    const float* c = cos_.data() + distance * half_;
    const float* s = sin_.data() + distance * half_;
    float acc = 0.0f;
    for (int64_t i = 0; i < half_; ++i) {
      const int64_t j = i + half_;
      acc += q[i] * (key[i] * c[i] + key[j] * s[i]);
      acc += q[j] * (key[j] * c[i] - key[i] * s[i]);
    }
    for (int64_t i = 2 * half_; i < params_.head_dim; ++i) acc += q[i] * key[i];
    return acc * scale_;
  }

  // Softmax over the stored tokens (oldest first) and the current one, the weighted sum of their
  // values into step.out; then the current k, v into ring entry step.next.
  void Attend(const HeadStep& step, int participant) {
    const int64_t hd = params_.head_dim;
    const int64_t entry_floats = params_.EntryFloats();
    const int64_t oldest = ring_ == 0 ? 0 : (step.next - step.count + ring_) % ring_;
    const auto entry = [&](int64_t j) {  // the j-th oldest stored token's k (v follows)
      return step.state + ((oldest + j) % ring_) * entry_floats + step.head * 2 * hd;
    };
    float* scores = workspace_.buffer(FirstCoreBuffer()) + int64_t{participant} * params_.window;
    float max = Score(step.q, step.k, 0);
    scores[step.count] = max;
    for (int64_t j = 0; j < step.count; ++j) {
      scores[j] = Score(step.q, entry(j), step.count - j);
      max = std::max(max, scores[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= step.count; ++j) {
      scores[j] = std::exp(scores[j] - max);
      sum += scores[j];
    }
    std::fill(step.out, step.out + hd, 0.0f);
    for (int64_t j = 0; j <= step.count; ++j) {
      const float* value = j < step.count ? entry(j) + hd : step.v;
      for (int64_t i = 0; i < hd; ++i) step.out[i] += scores[j] * value[i];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t i = 0; i < hd; ++i) step.out[i] *= inv_sum;
    if (ring_ > 0) {
      float* slot = step.state + step.next * entry_floats + step.head * 2 * hd;
      std::copy(step.k, step.k + hd, slot);
      std::copy(step.v, step.v + hd, slot + hd);
    }
  }

  const SlidingWindowAttentionParams params_;
  const int64_t ring_;  // R = window − 1
  const int64_t half_;  // rotary_dim / 2
  const float scale_;   // 1 / √head_dim
  // The pass's projected rows and the core's output, for its steps.
  const float* q_ = nullptr;
  const float* k_ = nullptr;
  const float* v_ = nullptr;
  float* out_ = nullptr;
  std::vector<float> cos_, sin_;  // [distance][i] for distance < window, i < rotary_dim / 2
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuSlidingWindowAttention(const CpuLayerContext& context,
                                                          const ComponentSpec& spec,
                                                          const LayerWeights& weights,
                                                          int64_t state_offset) {
  return std::make_unique<CpuSlidingWindowAttention>(
      context, SlidingWindowAttentionParams::From(spec.params), weights, state_offset);
}

}  // namespace linserve
