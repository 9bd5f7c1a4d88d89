// The mamba2 mixer (model/layers/mamba2.h) on the CPU: in_proj (CpuProjectedMixer); then per
// token, in order within a session, the convolution on x | B | C (cpu::ShortConvStep without a
// gate), dt and the log decay per head and the update's v = dt · x; the recurrence per head is
// gated linear attention's with one decay for every channel (kernels/cpu/gated_linear_attention.h,
// g_step 0: k = B and q = C of the head's group, v = dt · x; a step per token in decode, the
// chunked form per chunk in blocks of at most 64 tokens in prefill, whose one-token chunks are the
// step, so prefill with chunk 1 is bitwise the decode steps); then the D skip and the grouped gated
// RMSNorm per row; out_proj added to the residual.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/gated_linear_attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/backend/cpu/cpu_projected_mixer.h"
#include "model/layers/mamba2.h"

namespace linserve {
namespace {

// The convolution's weight [channels, taps] as the tap-major [taps, channels] table
// cpu::ShortConvStep reads.
std::vector<float> ConvTaps(const Mamba2Params& p, const LayerWeights& w) {
  const int64_t channels = p.ConvChannels();
  const Tensor& t = w.At("mamba.conv1d.weight");
  std::vector<float> taps(static_cast<size_t>(channels * p.conv_size));
  for (int64_t ch = 0; ch < channels; ++ch) {
    for (int64_t j = 0; j < p.conv_size; ++j) {
      taps[j * channels + ch] = t.data[ch * p.conv_size + j];
    }
  }
  return taps;
}

// softplus(x) = log(1 + e^x), x itself above 20 (PyTorch's threshold).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// Tokens of one chunked-form block at most: the block's scratch grows as its square.
constexpr int64_t kMaxChunk = 64;

class CpuMamba2 final : public CpuProjectedMixer {
 public:
  CpuMamba2(const CpuLayerContext& context, const Mamba2Params& p, const LayerWeights& w,
            int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, {"mamba.in_proj"}, "mamba.out_proj"),
        p_(p),
        chunk_(context.options.prefill_chunk_size),
        block_(std::min<int64_t>(chunk_, kMaxChunk)),
        taps_(ConvTaps(p, w)),
        conv_bias_(w.FindOrEmpty("mamba.conv1d.bias").data),
        dt_bias_(w.At("mamba.dt_bias").data),
        a_log_(w.At("mamba.A_log").data),
        d_(w.At("mamba.D").data),
        norm_(w.FindOrEmpty("mamba.norm.weight").data) {
    workspace_.Reserve(kRows(), int64_t{context.max_rows} * RowFloats());
    workspace_.Reserve(kScratch(), int64_t{context.threads} * ScratchFloats());
  }

 private:
  // Per token: x | B | C after the convolution, then v = dt · x (d_inner), then the log decay per
  // head.
  int64_t RowFloats() const { return p_.ConvChannels() + p_.InnerDim() + p_.n_heads; }

  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int64_t heads = p_.n_heads;
    const int64_t work = p_.HistoryOffset() * 4;  // per token: S read and written twice
    float* rows = workspace_.buffer(kRows());
    float* scratch = workspace_.buffer(kScratch());
    const float* in = inputs[0];
    const auto threads_for = [&](int64_t tasks) {
      return static_cast<int>(
          std::min<int64_t>(cpu::ThreadsForWork(threads_, pass.rows * work), tasks));
    };
    if (pass.prefill) {
      const int64_t pieces = static_cast<int64_t>(pass.pieces.size());
      cpu::ParallelFor(threads_for(pieces), pieces, [&](int64_t i, int) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(i)];
        float* state = State(pass, piece.slot);
        for (int r = piece.first_row; r < piece.first_row + piece.rows; ++r) {
          Prepare(in, r, state, rows);
        }
      });
      cpu::ParallelFor(threads_for(pieces * heads), pieces * heads,
                       [&](int64_t task, int participant) {
                         const PrefillPiece& piece = pass.pieces[static_cast<size_t>(task / heads)];
                         const int64_t h = task % heads;
                         float* s = State(pass, piece.slot) + h * p_.state_size * p_.head_dim;
                         for (int64_t c = 0; c < piece.rows; c += chunk_) {
                           const int64_t end = std::min<int64_t>(piece.rows, c + chunk_);
                           for (int64_t r = c; r < end; r += block_) {
                             const int n = static_cast<int>(std::min<int64_t>(end - r, block_));
                             Recur(rows, static_cast<int>(piece.first_row + r), n, h, s, out,
                                   scratch + participant * ScratchFloats());
                           }
                         }
                       });
    } else {
      cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int participant) {
        float* state = State(pass, pass.decode_slots[r]);
        Prepare(in, static_cast<int>(r), state, rows);
        for (int64_t h = 0; h < heads; ++h) {
          Recur(rows, static_cast<int>(r), 1, h, state + h * p_.state_size * p_.head_dim, out,
                scratch + participant * ScratchFloats());
        }
      });
    }
    cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int) {
      Finish(in + r * p_.InColumns(), rows + r * RowFloats(), out + r * p_.InnerDim());
    });
  }

  // Token `row`: the convolution on its x | B | C (moving the slot's history on), dt, v = dt · x
  // and the log decay per head, into its row of `rows`.
  void Prepare(const float* in, int row, float* state, float* rows) const {
    const int64_t di = p_.InnerDim();
    const int64_t channels = p_.ConvChannels();
    const int64_t pd = p_.head_dim;
    const float* projected = in + row * p_.InColumns();
    float* y = rows + row * RowFloats();
    cpu::ShortConvStep(projected + di, /*gate=*/nullptr, channels, p_.conv_size, taps_.data(),
                       conv_bias_.empty() ? nullptr : conv_bias_.data(), state + p_.HistoryOffset(),
                       y);
    float* v = y + channels;
    float* g = v + di;
    const float* dt_raw = projected + di + channels;
    const float lo = static_cast<float>(p_.dt_limit_min);
    const float hi = static_cast<float>(p_.dt_limit_max);
    for (int64_t h = 0; h < p_.n_heads; ++h) {
      const float dt = std::clamp(Softplus(dt_raw[h] + dt_bias_[h]), lo, hi);
      const float log_decay = -std::exp(a_log_[h]) * dt;
      g[h] = log_decay >= kMamba2MinLogDecay ? log_decay : kMamba2MinLogDecay;  // NaN too
      for (int64_t j = 0; j < pd; ++j) v[h * pd + j] = dt * y[h * pd + j];
    }
  }

  // n tokens from `row` of head h on its S `s`: Sᵀ C into `out` (before the D skip and the norm).
  void Recur(const float* rows, int row, int n, int64_t h, float* s, float* out,
             float* scratch) const {
    const int64_t di = p_.InnerDim();
    const int64_t gn = p_.GroupStateDim();
    const int64_t ns = p_.state_size;
    const int64_t pd = p_.head_dim;
    const int64_t group = h / (p_.n_heads / p_.n_groups);
    const int64_t ld = RowFloats();
    const float* first = rows + row * ld;
    cpu::GatedLinearAttentionChunk(n, ns, pd, first + di + gn + group * ns, first + di + group * ns,
                                   ld, first + p_.ConvChannels() + h * pd, ld,
                                   first + p_.ConvChannels() + di + h, ld, /*g_step=*/0,
                                   /*rotation=*/nullptr, s, out + row * di + h * pd, di, scratch);
  }

  // One row: y += D ⊙ x, then the gate and the grouped RMSNorm (model/layers/mamba2.h).
  void Finish(const float* projected, const float* row, float* y) const {
    const int64_t di = p_.InnerDim();
    const int64_t pd = p_.head_dim;
    const float* z = projected;
    for (int64_t c = 0; c < di; ++c) {
      y[c] += (p_.d_has_hdim ? d_[c] : d_[c / pd]) * row[c];
    }
    if (!p_.rmsnorm) {
      for (int64_t c = 0; c < di; ++c) y[c] *= Silu(z[c]);
      return;
    }
    if (!p_.norm_before_gate) {
      for (int64_t c = 0; c < di; ++c) y[c] *= Silu(z[c]);
    }
    const int64_t size = di / p_.n_groups;
    const float eps = static_cast<float>(p_.norm_eps);
    for (int64_t g = 0; g < p_.n_groups; ++g) {
      float* u = y + g * size;
      float sum = 0.0f;
      for (int64_t c = 0; c < size; ++c) sum += u[c] * u[c];
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(size) + eps);
      for (int64_t c = 0; c < size; ++c) u[c] = u[c] * inv * norm_[g * size + c];
    }
    if (p_.norm_before_gate) {
      for (int64_t c = 0; c < di; ++c) y[c] *= Silu(z[c]);
    }
  }

  int64_t ScratchFloats() const {
    return cpu::GatedLinearAttentionChunkScratchFloats(static_cast<int>(block_), p_.state_size);
  }
  int kRows() const { return FirstCoreBuffer(); }
  int kScratch() const { return FirstCoreBuffer() + 1; }

  const Mamba2Params p_;
  const int64_t chunk_;  // --prefill_chunk_size
  const int64_t block_;  // tokens of one chunked-form block: the chunk, at most kMaxChunk
  const std::vector<float> taps_;
  const std::vector<float>& conv_bias_;  // empty without conv_bias
  const std::vector<float>& dt_bias_;
  const std::vector<float>& a_log_;
  const std::vector<float>& d_;     // [n_heads], or [d_inner] with d_has_hdim
  const std::vector<float>& norm_;  // [d_inner]; empty without rmsnorm
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuMamba2(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const LayerWeights& weights, int64_t state_offset) {
  return std::make_unique<CpuMamba2>(context, Mamba2Params::From(spec.params), weights,
                                     state_offset);
}

}  // namespace linserve
