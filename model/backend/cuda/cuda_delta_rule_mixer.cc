// The delta-rule mixer on CUDA (model/layers/delta_rule_shape.h; the kinds gated_delta_net and
// delta_net), a CudaProjectedMixer: one GEMM for q, k, v (and a, b, g as the layer has them); the
// short convolutions on q | k | v (kernels/cuda/short_conv.h, ungated, into fp32 scratch); the
// delta rule with its norms (kernels/cuda/delta_rule.h) on the layer's state slice, writing
// o_proj's input; then o_proj. Decode is one launch of each over the batch, a prefill pass one of
// each for all its sessions.

#include "model/backend/cuda/cuda_delta_rule_mixer.h"

#include <string>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_projected_mixer.h"

namespace linserve {
namespace {

// Scratch buffer (ScratchRole::kMixer index): q | k | v after the convolutions.
constexpr int kConvOut = CudaProjectedMixer::kFirstCoreBuffer;

// Columns of the fused input projection: q, k, v, then a (decay), b (beta) and g (gate) where the
// layer has them.
int64_t InColumns(const DeltaRuleShape& p) {
  return p.ConvChannels() + (p.decay ? p.v_heads : 0) + (p.beta ? p.v_heads : 0) +
         (p.gate ? p.ValueDim() : 0);
}

class CudaDeltaRuleMixer final : public CudaProjectedMixer {
 public:
  CudaDeltaRuleMixer(const CudaLayerContext& context, const DeltaRuleShape& p,
                     const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("in"), InColumns(p), w.Matrix("o"),
                           p.ValueDim(), /*out_bias=*/nullptr),
        p_(p) {
    conv_.channels = static_cast<int>(p.ConvChannels());
    conv_.kernel = p.conv_size;
    conv_.weight = w.RequiredVector("conv");
    conv_.conv_bias = w.Vector("conv_bias");
    conv_.gated = false;
    conv_.a_stride = InColumns(p);
    rule_.shape.heads = p.heads;
    rule_.shape.v_heads = p.v_heads;
    rule_.shape.k_dim = p.k_dim;
    rule_.shape.v_dim = p.v_dim;
    rule_.shape.allow_neg_eigval = p.allow_neg_eigval;
    rule_.shape.norm_eps = static_cast<float>(p.norm_eps);
    rule_.shape.l2_eps = kDeltaRuleL2Eps;
    rule_.shape.min_log_decay = kDeltaRuleMinLogDecay;
    if (p.decay) {
      rule_.shape.a_log = w.RequiredVector("A_log");
      rule_.shape.dt_bias = w.RequiredVector("dt_bias");
    }
    rule_.shape.o_norm = w.RequiredVector("o_norm");
    rule_.proj_stride = InColumns(p);
    int64_t col = p.ConvChannels();  // a, b and g follow q | k | v where the layer has them
    if (p.decay) {
      rule_.a_col = col;
      col += p.v_heads;
    }
    if (p.beta) {
      rule_.b_col = col;
      col += p.v_heads;
    }
    rule_.g_col = p.gate ? col : -1;
    rule_.layer_offset = state_offset;
    rule_.out_dtype = dtype_;
    context.scratch.Reserve(
        ScratchRole::kMixer, kConvOut,
        static_cast<size_t>(context.max_rows) * p.ConvChannels() * sizeof(float));
  }

  absl::Status Check() const override {
    LINSERVE_RETURN_IF_ERROR(cuda::CheckShortConvShape(conv_));
    return cuda::CheckGatedDeltaRuleShape(rule_.shape);
  }

 private:
  // `in`: the projections' rows (fp32); `out`: o_proj's input (T).
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* in, void* out) override {
    const CudaWorkspace& ws = *pass.workspace;
    float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kConvOut));
    float* state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
    const int64_t history = state_offset_ + p_.HistoryOffset();
    cuda::GatedDeltaRuleRows rule = rule_;
    rule.qkv = qkv;
    rule.proj = in;
    rule.state = state;
    rule.slot_stride = pass.state_floats;
    rule.out = out;
    LINSERVE_RETURN_IF_ERROR(ShortConv(s, pass, conv_, in, history, cuda::DType::kF32, qkv));
    if (pass.prefill == nullptr) {
      return cuda::LaunchDecodeGatedDeltaRule(s, rule, ws.device_rows.slots, pass.rows);
    }
    return cuda::LaunchPrefillGatedDeltaRule(s, rule, *pass.prefill);
  }

  const DeltaRuleShape p_;
  cuda::ShortConvShape conv_;
  cuda::GatedDeltaRuleRows rule_;  // all but the pass's pointers
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfDeltaRule(const DeltaRuleShape& p) {
  std::vector<std::string> in = {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"};
  if (p.decay) in.push_back("attn.a_proj.weight");
  if (p.beta) in.push_back("attn.b_proj.weight");
  if (p.gate) in.push_back("attn.g_proj.weight");
  return {{"in", std::move(in), /*matrix=*/true},
          {"conv",  // fp32 [2·key_dim + value_dim, conv_size]: q | k | v's taps
           {"attn.q_conv1d.weight", "attn.k_conv1d.weight", "attn.v_conv1d.weight"}},
          {"conv_bias", {"attn.q_conv1d.bias", "attn.k_conv1d.bias", "attn.v_conv1d.bias"}},
          {"A_log", {"attn.A_log"}},
          {"dt_bias", {"attn.dt_bias"}},
          {"o_norm", {"attn.o_norm.weight"}},
          {"o", {"attn.o_proj.weight"}, /*matrix=*/true}};
}

std::unique_ptr<CudaMixer> CreateCudaDeltaRuleMixer(const CudaLayerContext& context,
                                                    const DeltaRuleShape& shape,
                                                    const CudaLayerWeights& weights,
                                                    int64_t state_offset) {
  return std::make_unique<CudaDeltaRuleMixer>(context, shape, weights, state_offset);
}

}  // namespace linserve
