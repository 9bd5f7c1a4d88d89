// The gated linear-attention mixer on CUDA (model/layers/gated_linear_attention_shape.h; the kinds
// gated_linear_attention and retention), a CudaProjectedMixer: one GEMM for q, k, v (and
// gk_proj.0, g as the layer has them); with the short convolutions, those on q | k | v
// (kernels/cuda/short_conv.h, ungated, into fp32 scratch); the recurrence with its gate, turn and
// norm (kernels/cuda/gated_linear_attention.h) on the layer's state slice, writing o_proj's input;
// then o_proj. Decode is one launch of each over the batch, a prefill pass one of each for all its
// sessions.

#include "model/backend/cuda/cuda_gated_linear_attention_mixer.h"

#include <string>
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gated_linear_attention.h"
#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_projected_mixer.h"

namespace linserve {
namespace {

// Scratch buffer (ScratchRole::kMixer index): q | k | v after the convolutions.
constexpr int kConvOut = CudaProjectedMixer::kFirstCoreBuffer;

bool LowRank(const GatedLinearAttentionShape& p) {
  return p.gate == GatedLinearAttentionShape::Gate::kLowRank;
}

// Columns of the fused input projection: q, k, v, then gk_proj.0 and g where the layer has them.
int64_t InColumns(const GatedLinearAttentionShape& p) {
  return 2 * p.KeyDim() + p.ValueDim() + (LowRank(p) ? p.rank : 0) +
         (p.output_gate ? p.ValueDim() : 0);
}

class CudaGatedLinearAttentionMixer final : public CudaProjectedMixer {
 public:
  CudaGatedLinearAttentionMixer(const CudaLayerContext& context, const GatedLinearAttentionShape& p,
                                const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("in"), InColumns(p), w.Matrix("o"),
                           p.ValueDim(), /*out_bias=*/nullptr),
        p_(p) {
    if (p.short_conv) {
      conv_.channels = static_cast<int>(p.ConvChannels());
      conv_.kernel = p.conv_size;
      conv_.weight = w.RequiredVector("conv");
      conv_.conv_bias = w.Vector("conv_bias");
      conv_.gated = false;
      conv_.a_stride = InColumns(p);
      context.scratch.Reserve(
          ScratchRole::kMixer, kConvOut,
          static_cast<size_t>(context.max_rows) * p.ConvChannels() * sizeof(float));
    }
    cuda::GatedLinearAttentionShape& shape = rows_.shape;
    shape.heads = p.heads;
    shape.k_dim = p.k_dim;
    shape.v_dim = p.v_dim;
    shape.norm_eps = static_cast<float>(p.norm_eps);
    if (LowRank(p)) {
      shape.rank = p.rank;
      shape.gate_logit_normalizer = static_cast<float>(p.normalizer);
      shape.clamp_min = static_cast<float>(p.clamp_min);
      shape.gate_up = w.RequiredVector("gate_up");
      shape.gate_bias = w.RequiredVector("gate_bias");
    }
    shape.rotary = p.rotary;
    shape.rope_base = p.rope_base;
    shape.g_norm = w.RequiredVector("g_norm");
    rows_.qkv_stride = p.short_conv ? p.ConvChannels() : InColumns(p);
    rows_.proj_stride = InColumns(p);
    rows_.low_col = 2 * p.KeyDim() + p.ValueDim();
    rows_.g_col = p.output_gate ? rows_.low_col + (LowRank(p) ? p.rank : 0) : -1;
    rows_.layer_offset = state_offset;
    rows_.out_dtype = dtype_;
  }

  absl::Status Check() const override {
    if (p_.short_conv) LINSERVE_RETURN_IF_ERROR(cuda::CheckShortConvShape(conv_));
    return cuda::CheckGatedLinearAttentionShape(rows_.shape);
  }

 private:
  // `in`: the projections' rows (fp32); `out`: o_proj's input (T).
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* in, void* out) override {
    const CudaWorkspace& ws = *pass.workspace;
    float* state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
    cuda::GatedLinearAttentionRows rows = rows_;
    rows.qkv = in;
    rows.proj = in;
    rows.state = state;
    rows.slot_stride = pass.state_floats;
    rows.out = out;
    if (p_.short_conv) {
      float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kConvOut));
      LINSERVE_RETURN_IF_ERROR(ShortConv(s, pass, conv_, in, state_offset_ + p_.HistoryOffset(),
                                         cuda::DType::kF32, qkv));
      rows.qkv = qkv;
    }
    if (pass.prefill == nullptr) {
      return cuda::LaunchDecodeGatedLinearAttention(s, rows, ws.device_rows.slots, pass.rows);
    }
    return cuda::LaunchPrefillGatedLinearAttention(s, rows, *pass.prefill);
  }

  const GatedLinearAttentionShape p_;
  cuda::ShortConvShape conv_;            // with the short convolutions
  cuda::GatedLinearAttentionRows rows_;  // all but the pass's pointers
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfGatedLinearAttentionMixer(
    const GatedLinearAttentionShape& p) {
  std::vector<std::string> in = {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"};
  if (LowRank(p)) in.push_back("attn.gk_proj.0.weight");
  if (p.output_gate) in.push_back("attn.g_proj.weight");
  return {{"in", std::move(in), /*matrix=*/true},
          {"conv",  // fp32 [2·key_dim + value_dim, conv_size]: q | k | v's taps
           {"attn.q_conv1d.weight", "attn.k_conv1d.weight", "attn.v_conv1d.weight"}},
          {"conv_bias", {"attn.q_conv1d.bias", "attn.k_conv1d.bias", "attn.v_conv1d.bias"}},
          {"gate_up", {"attn.gk_proj.1.weight"}},
          {"gate_bias", {"attn.gk_proj.1.bias"}},
          {"g_norm", {"attn.g_norm.weight"}},
          {"o", {"attn.o_proj.weight"}, /*matrix=*/true}};
}

std::unique_ptr<CudaMixer> CreateCudaGatedLinearAttentionMixer(
    const CudaLayerContext& context, const GatedLinearAttentionShape& shape,
    const CudaLayerWeights& weights, int64_t state_offset) {
  return std::make_unique<CudaGatedLinearAttentionMixer>(context, shape, weights, state_offset);
}

}  // namespace linserve
