// The gated_delta_net mixer (model/layers/gated_delta_net.h) on the CPU: q, k, v, a, b (and g)
// projected (CpuProjectedMixer); then per token, in order within a session, the short
// convolutions on q | k | v (cpu::ShortConvStep without a gate), the L2 norms, the gated delta
// rule per value head and the gated RMSNorm (kernels/cpu/delta_rule.h); o_proj added to the
// residual. Prefill runs the decode step token by token, so a chunk leaves bitwise the state its
// tokens fed one at a time leave.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/backend/cpu/cpu_projected_mixer.h"
#include "model/layers/gated_delta_net.h"

namespace linserve {
namespace {

std::vector<std::string> Inputs(const GatedDeltaNetParams& p) {
  std::vector<std::string> inputs = {"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.a_proj",
                                     "attn.b_proj"};
  if (p.use_gate) inputs.push_back("attn.g_proj");
  return inputs;
}

// The three convolutions' weights ([channels, taps] each) as one tap-major [taps, C] table over
// the channels q | k | v, as cpu::ShortConvStep reads it; their biases as one [C] vector (empty
// without conv_bias).
std::vector<float> ConvTaps(const GatedDeltaNetParams& p, const LayerWeights& w) {
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

std::vector<float> ConvBias(const GatedDeltaNetParams& p, const LayerWeights& w) {
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

class CpuGatedDeltaNet final : public CpuProjectedMixer {
 public:
  CpuGatedDeltaNet(const CpuLayerContext& context, const GatedDeltaNetParams& p,
                   const LayerWeights& w, int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, Inputs(p), "attn.o_proj"),
        p_(p),
        taps_(ConvTaps(p, w)),
        conv_bias_(ConvBias(p, w)),
        a_log_(w.At("attn.A_log").data),
        dt_bias_(w.At("attn.dt_bias").data),
        o_norm_(w.At("attn.o_norm.weight").data) {
    workspace_.Reserve(kScratch(), int64_t{context.threads} * ScratchFloats());
  }

 private:
  // inputs: q, k, v, a, b (and g) rows; `out`: the normed rows (value_dim wide).
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int64_t work = p_.HistoryOffset() * 4;  // per token: S read and written twice
    float* scratch = workspace_.buffer(kScratch());
    if (pass.prefill) {
      // The pieces in parallel, each piece's tokens in order.
      const int64_t pieces = static_cast<int64_t>(pass.pieces.size());
      const int threads = static_cast<int>(
          std::min<int64_t>(cpu::ThreadsForWork(threads_, pass.rows * work), pieces));
      cpu::ParallelFor(threads, pieces, [&](int64_t i, int participant) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(i)];
        float* state = State(pass, piece.slot);
        for (int r = piece.first_row; r < piece.first_row + piece.rows; ++r) {
          Step(inputs, r, state, out, scratch + participant * ScratchFloats());
        }
      });
    } else {
      const int threads = static_cast<int>(
          std::min<int64_t>(cpu::ThreadsForWork(threads_, pass.rows * work), pass.rows));
      cpu::ParallelFor(threads, pass.rows, [&](int64_t r, int participant) {
        Step(inputs, static_cast<int>(r), State(pass, pass.decode_slots[r]), out,
             scratch + participant * ScratchFloats());
      });
    }
  }

  // One token: row `row` of the inputs, the slot's layer state `state`.
  void Step(absl::Span<float* const> inputs, int row, float* state, float* out,
            float* scratch) const {
    const int64_t kd = p_.KeyDim();
    const int64_t vd = p_.ValueDim();
    const int64_t channels = p_.ConvChannels();
    const int64_t hk = p_.head_k_dim;
    const int64_t hv = p_.head_v_dim;
    float* x = scratch;               // q | k | v before the convolutions
    float* qkv = scratch + channels;  // after them
    float* u = qkv + channels;        // the step's v_dim floats
    std::copy_n(inputs[0] + row * kd, kd, x);
    std::copy_n(inputs[1] + row * kd, kd, x + kd);
    std::copy_n(inputs[2] + row * vd, vd, x + 2 * kd);
    cpu::ShortConvStep(x, /*gate=*/nullptr, channels, p_.conv_size, taps_.data(),
                       conv_bias_.empty() ? nullptr : conv_bias_.data(), state + p_.HistoryOffset(),
                       qkv);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hk));
    for (int64_t h = 0; h < p_.n_heads; ++h) {
      cpu::L2Normalize(qkv + h * hk, hk, kGatedDeltaNetL2Eps, scale);
      cpu::L2Normalize(qkv + kd + h * hk, hk, kGatedDeltaNetL2Eps, 1.0f);
    }
    const int64_t group = p_.n_v_heads / p_.n_heads;
    const float* a = inputs[3] + row * int64_t{p_.n_v_heads};
    const float* b = inputs[4] + row * int64_t{p_.n_v_heads};
    for (int64_t vh = 0; vh < p_.n_v_heads; ++vh) {
      const int64_t h = vh / group;
      const float g = -std::exp(a_log_[vh]) * Softplus(a[vh] + dt_bias_[vh]);
      float beta = 1.0f / (1.0f + std::exp(-b[vh]));
      if (p_.allow_neg_eigval) beta *= 2.0f;
      float* o = out + row * vd + vh * hv;
      cpu::GatedDeltaRuleStep(qkv + h * hk, qkv + kd + h * hk, qkv + 2 * kd + vh * hv, std::exp(g),
                              beta, hk, hv, state + vh * hk * hv, o, u);
      const float* gate = p_.use_gate ? inputs[5] + row * vd + vh * hv : nullptr;
      cpu::GatedRmsNorm(o, hv, o_norm_.data(), gate, static_cast<float>(p_.norm_eps));
    }
  }

  int64_t ScratchFloats() const { return 2 * p_.ConvChannels() + p_.head_v_dim; }
  int kScratch() const { return FirstCoreBuffer(); }

  const GatedDeltaNetParams p_;
  const std::vector<float> taps_;
  const std::vector<float> conv_bias_;
  const std::vector<float>& a_log_;
  const std::vector<float>& dt_bias_;
  const std::vector<float>& o_norm_;
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuGatedDeltaNet(const CpuLayerContext& context,
                                                 const ComponentSpec& spec,
                                                 const LayerWeights& weights,
                                                 int64_t state_offset) {
  return std::make_unique<CpuGatedDeltaNet>(context, GatedDeltaNetParams::From(spec.params),
                                            weights, state_offset);
}

}  // namespace linserve
