// The gated linear-attention mixer on the CPU (model/layers/gated_linear_attention_shape.h; the
// kinds gated_linear_attention and retention): q, k, v (and gk_proj.0, g as the shape says)
// projected (CpuProjectedMixer); then per token, in order within a session, the short
// convolutions on q | k | v where the layer has them (cpu::ShortConvStep without a gate), q's
// scale and the key gate (GLA's gk = max(logsigmoid(gk_proj.1(·)) / normalizer, clamp_min), or
// RetNet's log γ_h); the recurrence per head (kernels/cpu/gated_linear_attention.h, with RoPE's
// turn for retention: a step per token in decode, the chunked form per chunk in blocks of at most
// 64 tokens in prefill, whose one-token chunks are the step, so prefill with chunk 1 is bitwise
// the decode steps); the gated RMSNorm; o_proj added to the residual.

#include "model/backend/cpu/cpu_gated_linear_attention_mixer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gated_linear_attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/backend/cpu/cpu_projected_mixer.h"

namespace linserve {
namespace {

bool LowRank(const GatedLinearAttentionShape& p) {
  return p.gate == GatedLinearAttentionShape::Gate::kLowRank;
}

// The input projections in order: q, k, v, then gk_proj.0 (the low-rank gate) and g (the output
// gate) where the layer has them.
std::vector<std::string> Inputs(const GatedLinearAttentionShape& p) {
  std::vector<std::string> inputs = {"attn.q_proj", "attn.k_proj", "attn.v_proj"};
  if (LowRank(p)) inputs.push_back("attn.gk_proj.0");
  if (p.output_gate) inputs.push_back("attn.g_proj");
  return inputs;
}
constexpr int kLowRankInput = 3;
int GateInput(const GatedLinearAttentionShape& p) { return LowRank(p) ? 4 : 3; }

// The tensor's data, or an empty vector without it (the low-rank gate's).
const std::vector<float>& DataOrEmpty(const LayerWeights& w, const char* name) {
  return w.FindOrEmpty(name).data;
}

// Per key channel, RetNet's log γ of its head (empty with the low-rank gate).
std::vector<float> FixedLogGates(const GatedLinearAttentionShape& p) {
  std::vector<float> g;
  if (LowRank(p)) return g;
  for (int64_t h = 0; h < p.heads; ++h) {
    g.insert(g.end(), static_cast<size_t>(p.k_dim), static_cast<float>(RetentionLogDecay(h)));
  }
  return g;
}

// The three convolutions' weights ([channels, taps] each) as one tap-major [taps, C] table over
// q | k | v, as cpu::ShortConvStep reads it (empty without them); their biases as one [C] vector.
std::vector<float> ConvTaps(const GatedLinearAttentionShape& p, const LayerWeights& w) {
  if (!p.short_conv) return {};
  const int64_t channels = p.ConvChannels();
  std::vector<float> taps(static_cast<size_t>(channels * p.conv_size));
  int64_t first = 0;
  for (const char* name :
       {"attn.q_conv1d.weight", "attn.k_conv1d.weight", "attn.v_conv1d.weight"}) {
    const Tensor& t = w.At(name);
    for (int64_t ch = 0; ch < t.shape[0]; ++ch) {
      for (int64_t j = 0; j < p.conv_size; ++j) {
        taps[j * channels + first + ch] = t.data[ch * p.conv_size + j];
      }
    }
    first += t.shape[0];
  }
  return taps;
}

std::vector<float> ConvBias(const GatedLinearAttentionShape& p, const LayerWeights& w) {
  std::vector<float> bias;
  if (!p.short_conv || !p.conv_bias) return bias;
  for (const char* name : {"attn.q_conv1d.bias", "attn.k_conv1d.bias", "attn.v_conv1d.bias"}) {
    const Tensor& t = w.At(name);
    bias.insert(bias.end(), t.data.begin(), t.data.end());
  }
  return bias;
}

// log(sigmoid(x)) = min(x, 0) − log1p(exp(−|x|)), finite for every finite x.
float LogSigmoid(float x) { return std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))); }

// Tokens of one chunked-form block at most (fla's chunk; the rotation's table reaches as far): the
// block's scratch grows as its square.
constexpr int64_t kMaxChunk = cpu::Rotation::kMaxTurns;

class CpuGatedLinearAttentionMixer final : public CpuProjectedMixer {
 public:
  CpuGatedLinearAttentionMixer(const CpuLayerContext& context, const GatedLinearAttentionShape& p,
                               const LayerWeights& w, int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, Inputs(p), "attn.o_proj"),
        p_(p),
        chunk_(context.options.prefill_chunk_size),
        block_(std::min<int64_t>(chunk_, kMaxChunk)),
        taps_(ConvTaps(p, w)),
        conv_bias_(ConvBias(p, w)),
        gate_up_(DataOrEmpty(w, "attn.gk_proj.1.weight")),
        gate_bias_(DataOrEmpty(w, "attn.gk_proj.1.bias")),
        fixed_gates_(FixedLogGates(p)),
        rotation_(p.rotary ? cpu::RotationTable(p.k_dim, p.rope_base) : cpu::Rotation{}),
        g_norm_(w.At("attn.g_norm.weight").data) {
    const int64_t rows = context.max_rows;
    workspace_.Reserve(kQkvg(), rows * RowFloats());
    workspace_.Reserve(kScratch(), int64_t{context.threads} * ScratchFloats());
  }

 private:
  // Per token in qkvg: q (scaled) | k | v | gk.
  int64_t RowFloats() const { return 3 * p_.KeyDim() + p_.ValueDim(); }

  // inputs: q, k, v, then gk_proj.0 and g rows where the layer has them; `out`: the normed rows
  // (value_dim wide). Each token is prepared in order within its session (the convolutions'
  // history), then the recurrence runs per (session, head) — by steps in decode, by chunks of
  // chunk_ tokens in blocks of at most kMaxChunk in prefill — and the gated norm per row.
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int64_t heads = p_.heads;
    const int64_t work = p_.HistoryOffset() * 4;  // per token: S read and written twice
    float* qkvg = workspace_.buffer(kQkvg());
    float* scratch = workspace_.buffer(kScratch());
    const auto threads_for = [&](int64_t tasks) {
      return static_cast<int>(
          std::min<int64_t>(cpu::ThreadsForWork(threads_, pass.rows * work), tasks));
    };
    if (pass.prefill) {
      const int64_t pieces = static_cast<int64_t>(pass.pieces.size());
      cpu::ParallelFor(threads_for(pieces), pieces, [&](int64_t i, int participant) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(i)];
        float* state = State(pass, piece.slot);
        for (int r = piece.first_row; r < piece.first_row + piece.rows; ++r) {
          Prepare(inputs, r, state, qkvg, scratch + participant * ScratchFloats());
        }
      });
      cpu::ParallelFor(threads_for(pieces * heads), pieces * heads,
                       [&](int64_t task, int participant) {
                         const PrefillPiece& piece = pass.pieces[static_cast<size_t>(task / heads)];
                         const int64_t h = task % heads;
                         float* s = State(pass, piece.slot) + h * p_.k_dim * p_.v_dim;
                         // The piece's chunks (whatever passes its session is cut into, the same
                         // ones), each in blocks of at most kMaxChunk tokens.
                         for (int64_t c = 0; c < piece.rows; c += chunk_) {
                           const int64_t end = std::min<int64_t>(piece.rows, c + chunk_);
                           for (int64_t r = c; r < end; r += block_) {
                             const int n = static_cast<int>(std::min<int64_t>(end - r, block_));
                             Recur(qkvg, static_cast<int>(piece.first_row + r), n, h, s, out,
                                   scratch + participant * ScratchFloats());
                           }
                         }
                       });
    } else {
      cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int participant) {
        float* state = State(pass, pass.decode_slots[r]);
        float* thread_scratch = scratch + participant * ScratchFloats();
        Prepare(inputs, static_cast<int>(r), state, qkvg, thread_scratch);
        for (int64_t h = 0; h < heads; ++h) {
          Recur(qkvg, static_cast<int>(r), 1, h, state + h * p_.k_dim * p_.v_dim, out,
                thread_scratch);
        }
      });
    }
    const float eps = static_cast<float>(p_.norm_eps);
    cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = r * p_.ValueDim() + h * p_.v_dim;
        const float* gate = p_.output_gate ? inputs[GateInput(p_)] + at : nullptr;
        cpu::GatedRmsNorm(out + at, p_.v_dim, g_norm_.data(), gate, eps);
      }
    });
  }

  // Token `row`: its q | k | v (through the short convolutions where the layer has them, moving
  // the slot's history on), q's scale and the key gate, into qkvg's row.
  void Prepare(absl::Span<float* const> inputs, int row, float* state, float* qkvg,
               float* scratch) const {
    const int64_t kd = p_.KeyDim();
    const int64_t vd = p_.ValueDim();
    float* y = qkvg + row * RowFloats();
    if (p_.short_conv) {
      float* x = scratch;  // q | k | v before the convolutions
      std::copy_n(inputs[0] + row * kd, kd, x);
      std::copy_n(inputs[1] + row * kd, kd, x + kd);
      std::copy_n(inputs[2] + row * vd, vd, x + 2 * kd);
      cpu::ShortConvStep(x, /*gate=*/nullptr, p_.ConvChannels(), p_.conv_size, taps_.data(),
                         conv_bias_.empty() ? nullptr : conv_bias_.data(),
                         state + p_.HistoryOffset(), y);
    } else {
      std::copy_n(inputs[0] + row * kd, kd, y);
      std::copy_n(inputs[1] + row * kd, kd, y + kd);
      std::copy_n(inputs[2] + row * vd, vd, y + 2 * kd);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(p_.k_dim));
    for (int64_t c = 0; c < kd; ++c) y[c] *= scale;
    float* gk = y + 2 * kd + vd;
    if (!LowRank(p_)) {
      std::copy(fixed_gates_.begin(), fixed_gates_.end(), gk);
      return;
    }
    const int64_t rank = p_.rank;
    const float* low = inputs[kLowRankInput] + row * rank;
    const float normalizer = static_cast<float>(p_.normalizer);
    const float floor = static_cast<float>(p_.clamp_min);
    for (int64_t c = 0; c < kd; ++c) {
      const float* w = gate_up_.data() + c * rank;
      float logit = gate_bias_[c];
      for (int64_t j = 0; j < rank; ++j) logit += w[j] * low[j];
      const float g = LogSigmoid(logit) / normalizer;
      gk[c] = g >= floor ? g : floor;  // NaN too
    }
  }

  // n tokens from `row` of head h on its S `s`: outputs (before the norm) into `out`.
  void Recur(const float* qkvg, int row, int n, int64_t h, float* s, float* out,
             float* scratch) const {
    const int64_t kd = p_.KeyDim();
    const int64_t hk = p_.k_dim;
    const int64_t hv = p_.v_dim;
    const int64_t ld = RowFloats();
    const float* first = qkvg + row * ld;
    cpu::GatedLinearAttentionChunk(
        n, hk, hv, first + h * hk, first + kd + h * hk, ld, first + 2 * kd + h * hv, ld,
        first + 2 * kd + p_.ValueDim() + h * hk, ld, /*g_step=*/1, p_.rotary ? &rotation_ : nullptr,
        s, out + row * p_.ValueDim() + h * hv, p_.ValueDim(), scratch);
  }

  // Per thread: the larger of Prepare's q | k | v and Recur's chunk scratch.
  int64_t ScratchFloats() const {
    return std::max(p_.ConvChannels(), cpu::GatedLinearAttentionChunkScratchFloats(
                                           static_cast<int>(block_), p_.k_dim));
  }
  // Workspace buffers after the projections'.
  int kQkvg() const { return FirstCoreBuffer(); }
  int kScratch() const { return FirstCoreBuffer() + 1; }

  const GatedLinearAttentionShape p_;
  const int64_t chunk_;  // --prefill_chunk_size
  const int64_t block_;  // tokens of one chunked-form block: the chunk, at most kMaxChunk
  const std::vector<float> taps_;
  const std::vector<float> conv_bias_;
  const std::vector<float>& gate_up_;     // gk_proj.1 [key_dim, rank]; empty: a fixed gate
  const std::vector<float>& gate_bias_;   // [key_dim]
  const std::vector<float> fixed_gates_;  // retention: log γ per key channel
  const cpu::Rotation rotation_;          // retention: RoPE's turns
  const std::vector<float>& g_norm_;
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuGatedLinearAttentionMixer(const CpuLayerContext& context,
                                                             const GatedLinearAttentionShape& shape,
                                                             const LayerWeights& weights,
                                                             int64_t state_offset) {
  return std::make_unique<CpuGatedLinearAttentionMixer>(context, shape, weights, state_offset);
}

}  // namespace linserve
