// The delta-rule mixer on the CPU (model/layers/delta_rule_shape.h; the kinds gated_delta_net
// and delta_net): q, k, v (and a, b, g as the shape says) projected (CpuProjectedMixer); then per
// token, in order within a session, the short convolutions on q | k | v (cpu::ShortConvStep
// without a gate) and the L2 norms; the rule per value head (kernels/cpu/delta_rule.h: a step per
// token in decode, the WY form per chunk in prefill, whose one-token chunks are the step, so
// prefill with chunk 1 is bitwise the decode steps); the gated RMSNorm; o_proj added to the
// residual.

#include "model/backend/cpu/cpu_delta_rule_mixer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/backend/cpu/cpu_projected_mixer.h"

namespace linserve {
namespace {

// The input projections in order: q, k, v, then a, b and g where the shape has them.
std::vector<std::string> Inputs(const DeltaRuleShape& p) {
  std::vector<std::string> inputs = {"attn.q_proj", "attn.k_proj", "attn.v_proj"};
  if (p.decay) inputs.push_back("attn.a_proj");
  if (p.beta) inputs.push_back("attn.b_proj");
  if (p.gate) inputs.push_back("attn.g_proj");
  return inputs;
}

// Where an optional input projection is in Inputs(), or -1.
struct InputIndex {
  int a = -1, b = -1, g = -1;
  explicit InputIndex(const DeltaRuleShape& p) {
    int next = 3;
    if (p.decay) a = next++;
    if (p.beta) b = next++;
    if (p.gate) g = next++;
  }
};

// The tensor's data, or an empty vector without it (the decay's A_log and dt_bias).
const std::vector<float>& DataOrEmpty(const LayerWeights& w, const char* name) {
  return w.FindOrEmpty(name).data;
}

// The three convolutions' weights ([channels, taps] each) as one tap-major [taps, C] table over
// the channels q | k | v, as cpu::ShortConvStep reads it; their biases as one [C] vector (empty
// without conv_bias).
std::vector<float> ConvTaps(const DeltaRuleShape& p, const LayerWeights& w) {
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

std::vector<float> ConvBias(const DeltaRuleShape& p, const LayerWeights& w) {
  std::vector<float> bias;
  if (!p.conv_bias) return bias;
  for (const char* name : {"attn.q_conv1d.bias", "attn.k_conv1d.bias", "attn.v_conv1d.bias"}) {
    const Tensor& t = w.At(name);
    bias.insert(bias.end(), t.data.begin(), t.data.end());
  }
  return bias;
}

// softplus(x) = log(1 + e^x), x itself above 20 (PyTorch's threshold).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Tokens of one WY block at most (fla's chunk): the block's scratch grows as its square and the
// cumulative decay within it loses precision with its length.
constexpr int64_t kMaxWyChunk = 64;

class CpuDeltaRuleMixer final : public CpuProjectedMixer {
 public:
  CpuDeltaRuleMixer(const CpuLayerContext& context, const DeltaRuleShape& p, const LayerWeights& w,
                    int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, Inputs(p), "attn.o_proj"),
        p_(p),
        index_(p),
        chunk_(context.options.prefill_chunk_size),
        wy_(std::min<int64_t>(chunk_, kMaxWyChunk)),
        taps_(ConvTaps(p, w)),
        conv_bias_(ConvBias(p, w)),
        a_log_(DataOrEmpty(w, "attn.A_log")),
        dt_bias_(DataOrEmpty(w, "attn.dt_bias")),
        o_norm_(w.At("attn.o_norm.weight").data) {
    const int64_t rows = context.max_rows;
    workspace_.Reserve(kQkv(), rows * p.ConvChannels());
    workspace_.Reserve(kBetaG(), rows * 2 * int64_t{p.v_heads});
    workspace_.Reserve(kScratch(), int64_t{context.threads} * ScratchFloats());
  }

 private:
  // inputs: q, k, v rows, then a, b and g where the layer has them (InputIndex); `out`: the
  // normed rows (value_dim wide). Each token is
  // prepared in order within its session (the convolutions' history), then the rule runs per
  // (session, value head) — by steps in decode, by chunks of chunk_ tokens in WY blocks of at most
  // kMaxWyChunk in prefill — and the
  // gated norm per row.
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int64_t hv = p_.v_heads;
    const int64_t work = p_.HistoryOffset() * 4;  // per token: S read and written twice
    float* qkv = workspace_.buffer(kQkv());
    float* beta_g = workspace_.buffer(kBetaG());
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
          Prepare(inputs, r, state, qkv, beta_g, scratch + participant * ScratchFloats());
        }
      });
      cpu::ParallelFor(threads_for(pieces * hv), pieces * hv, [&](int64_t task, int participant) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(task / hv)];
        const int64_t vh = task % hv;
        float* s = State(pass, piece.slot) + vh * p_.k_dim * p_.v_dim;
        // The piece's chunks (whatever passes its session is cut into, the same ones), each in
        // WY blocks of at most kMaxWyChunk tokens.
        for (int64_t c = 0; c < piece.rows; c += chunk_) {
          const int64_t end = std::min<int64_t>(piece.rows, c + chunk_);
          for (int64_t r = c; r < end; r += wy_) {
            const int n = static_cast<int>(std::min<int64_t>(end - r, wy_));
            Rule(qkv, beta_g, static_cast<int>(piece.first_row + r), n, vh, s, out,
                 scratch + participant * ScratchFloats());
          }
        }
      });
    } else {
      cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int participant) {
        float* state = State(pass, pass.decode_slots[r]);
        float* thread_scratch = scratch + participant * ScratchFloats();
        Prepare(inputs, static_cast<int>(r), state, qkv, beta_g, thread_scratch);
        for (int64_t vh = 0; vh < hv; ++vh) {
          Rule(qkv, beta_g, static_cast<int>(r), 1, vh, state + vh * p_.k_dim * p_.v_dim, out,
               thread_scratch);
        }
      });
    }
    const float eps = static_cast<float>(p_.norm_eps);
    cpu::ParallelFor(threads_for(pass.rows), pass.rows, [&](int64_t r, int) {
      for (int64_t vh = 0; vh < hv; ++vh) {
        const int64_t at = r * p_.ValueDim() + vh * p_.v_dim;
        const float* gate = p_.gate ? inputs[index_.g] + at : nullptr;
        cpu::GatedRmsNorm(out + at, p_.v_dim, o_norm_.data(), gate, eps);
      }
    });
  }

  // Token `row`: the short convolutions on its q | k | v (moving the slot's history on), the L2
  // norms of q and k, into qkv's row; its β and log decay g per value head into beta_g's row.
  void Prepare(absl::Span<float* const> inputs, int row, float* state, float* qkv, float* beta_g,
               float* scratch) const {
    const int64_t kd = p_.KeyDim();
    const int64_t vd = p_.ValueDim();
    const int64_t channels = p_.ConvChannels();
    const int64_t hk = p_.k_dim;
    float* x = scratch;  // q | k | v before the convolutions
    float* y = qkv + row * channels;
    std::copy_n(inputs[0] + row * kd, kd, x);
    std::copy_n(inputs[1] + row * kd, kd, x + kd);
    std::copy_n(inputs[2] + row * vd, vd, x + 2 * kd);
    cpu::ShortConvStep(x, /*gate=*/nullptr, channels, p_.conv_size, taps_.data(),
                       conv_bias_.empty() ? nullptr : conv_bias_.data(), state + p_.HistoryOffset(),
                       y);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hk));
    for (int64_t h = 0; h < p_.heads; ++h) {
      cpu::L2Normalize(y + h * hk, hk, kDeltaRuleL2Eps, scale);
      cpu::L2Normalize(y + kd + h * hk, hk, kDeltaRuleL2Eps, 1.0f);
    }
    const int64_t hv = p_.v_heads;
    float* beta = beta_g + row * 2 * hv;
    float* g = beta + hv;
    for (int64_t vh = 0; vh < hv; ++vh) {
      // Without a decay g = 0 (exp(0) = 1 exactly); without b_proj β = 1.
      if (p_.decay) {
        const float log_decay =
            -std::exp(a_log_[vh]) * Softplus(inputs[index_.a][row * hv + vh] + dt_bias_[vh]);
        g[vh] = log_decay >= kDeltaRuleMinLogDecay ? log_decay : kDeltaRuleMinLogDecay;  // NaN too
      } else {
        g[vh] = 0.0f;
      }
      beta[vh] = p_.beta ? 1.0f / (1.0f + std::exp(-inputs[index_.b][row * hv + vh])) : 1.0f;
      if (p_.allow_neg_eigval) beta[vh] *= 2.0f;
    }
  }

  // n tokens from `row` of value head vh on its S `s`: outputs (before the norm) into `out`.
  void Rule(const float* qkv, const float* beta_g, int row, int n, int64_t vh, float* s, float* out,
            float* scratch) const {
    const int64_t kd = p_.KeyDim();
    const int64_t channels = p_.ConvChannels();
    const int64_t hk = p_.k_dim;
    const int64_t hv = p_.v_heads;
    const int64_t h = vh / (hv / p_.heads);
    const float* first = qkv + row * channels;
    // β and g of the n tokens, gathered from their rows.
    float* beta =
        scratch + cpu::GatedDeltaRuleChunkScratchFloats(static_cast<int>(wy_), hk, p_.v_dim);
    float* g = beta + wy_;
    for (int i = 0; i < n; ++i) {
      beta[i] = beta_g[(row + i) * 2 * hv + vh];
      g[i] = beta_g[(row + i) * 2 * hv + hv + vh];
    }
    cpu::GatedDeltaRuleChunk(n, hk, p_.v_dim, first + h * hk, first + kd + h * hk, channels,
                             first + 2 * kd + vh * p_.v_dim, channels, beta, g, s,
                             out + row * p_.ValueDim() + vh * p_.v_dim, p_.ValueDim(), scratch);
  }

  // Per thread: the larger of Prepare's q | k | v and Rule's chunk scratch with β and g.
  int64_t ScratchFloats() const {
    return std::max(
        p_.ConvChannels(),
        cpu::GatedDeltaRuleChunkScratchFloats(static_cast<int>(wy_), p_.k_dim, p_.v_dim) + 2 * wy_);
  }
  // Workspace buffers after the projections'.
  int kQkv() const { return FirstCoreBuffer(); }
  int kBetaG() const { return FirstCoreBuffer() + 1; }
  int kScratch() const { return FirstCoreBuffer() + 2; }

  const DeltaRuleShape p_;
  const InputIndex index_;
  const int64_t chunk_;  // --prefill_chunk_size
  const int64_t wy_;     // tokens of one WY block: the chunk, at most kMaxWyChunk
  const std::vector<float> taps_;
  const std::vector<float> conv_bias_;
  const std::vector<float>& a_log_;    // empty without the decay
  const std::vector<float>& dt_bias_;  // empty without the decay
  const std::vector<float>& o_norm_;
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuDeltaRuleMixer(const CpuLayerContext& context,
                                                  const DeltaRuleShape& shape,
                                                  const LayerWeights& weights,
                                                  int64_t state_offset) {
  return std::make_unique<CpuDeltaRuleMixer>(context, shape, weights, state_offset);
}

}  // namespace linserve
