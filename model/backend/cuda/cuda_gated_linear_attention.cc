// The CUDA implementation of the "gated_linear_attention" mixer
// (model/layers/gated_linear_attention.h), a CudaProjectedMixer: one GEMM for q, k, v, gk_proj.0
// (and g); with use_short_conv the short convolutions on q | k | v (kernels/cuda/short_conv.h,
// ungated, into fp32 scratch); the recurrence with its gate and norm
// (kernels/cuda/gated_linear_attention.h) on the layer's state slice, writing o_proj's input;
// then o_proj. Decode is one launch of each over the batch, a prefill pass one of each for all its
// sessions.

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gated_linear_attention.h"
#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_layer.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/gated_linear_attention.h"

namespace linserve {
namespace {

// Scratch buffer (ScratchRole::kMixer index): q | k | v after the convolutions.
constexpr int kConvOut = CudaProjectedMixer::kFirstCoreBuffer;

// Columns of the fused input projection: q, k, v, gk_proj.0, then g with the output gate.
int64_t InColumns(const GatedLinearAttentionParams& p) {
  return 2 * p.KeyDim() + p.ValueDim() + p.gate_low_rank_dim +
         (p.use_output_gate ? p.ValueDim() : 0);
}

class CudaGatedLinearAttention final : public CudaProjectedMixer {
 public:
  CudaGatedLinearAttention(const CudaLayerContext& context, const GatedLinearAttentionParams& p,
                           const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("in"), InColumns(p), w.Matrix("o"),
                           p.ValueDim(), /*out_bias=*/nullptr),
        p_(p) {
    if (p.use_short_conv) {
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
    shape.heads = p.n_heads;
    shape.k_dim = p.head_k_dim;
    shape.v_dim = p.head_v_dim;
    shape.rank = p.gate_low_rank_dim;
    shape.gate_logit_normalizer = static_cast<float>(p.gate_logit_normalizer);
    shape.clamp_min = static_cast<float>(p.clamp_min);
    shape.norm_eps = static_cast<float>(p.norm_eps);
    shape.gate_up = w.RequiredVector("gate_up");
    shape.gate_bias = w.RequiredVector("gate_bias");
    shape.g_norm = w.RequiredVector("g_norm");
    rows_.qkv_stride = p.use_short_conv ? p.ConvChannels() : InColumns(p);
    rows_.proj_stride = InColumns(p);
    rows_.low_col = 2 * p.KeyDim() + p.ValueDim();
    rows_.g_col = p.use_output_gate ? rows_.low_col + p.gate_low_rank_dim : -1;
    rows_.layer_offset = state_offset;
    rows_.out_dtype = dtype_;
  }

  absl::Status Check() const override {
    if (p_.use_short_conv) LINSERVE_RETURN_IF_ERROR(cuda::CheckShortConvShape(conv_));
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
    const int64_t history = state_offset_ + p_.HistoryOffset();
    if (pass.prefill == nullptr) {
      if (p_.use_short_conv) {
        float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kConvOut));
        cuda::DecodeShortConvArgs conv;
        conv.shape = conv_;
        conv.a = in;
        conv.slots = ws.device_rows.slots;
        conv.state = state;
        conv.slot_stride = pass.state_floats;
        conv.layer_offset = history;
        conv.rows = pass.rows;
        conv.out_dtype = cuda::DType::kF32;
        conv.out = qkv;
        LINSERVE_RETURN_IF_ERROR(cuda::LaunchDecodeShortConv(s, conv));
        rows.qkv = qkv;
      }
      return cuda::LaunchDecodeGatedLinearAttention(s, rows, ws.device_rows.slots, pass.rows);
    }
    if (p_.use_short_conv) {
      float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kConvOut));
      cuda::PrefillShortConvArgs conv;
      conv.shape = conv_;
      conv.a = in;
      conv.tables = *pass.prefill;
      conv.state = state;
      conv.slot_stride = pass.state_floats;
      conv.layer_offset = history;
      conv.out_dtype = cuda::DType::kF32;
      conv.out = qkv;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchPrefillShortConv(s, conv));
      rows.qkv = qkv;
    }
    return cuda::LaunchPrefillGatedLinearAttention(s, rows, *pass.prefill);
  }

  const GatedLinearAttentionParams p_;
  cuda::ShortConvShape conv_;            // with use_short_conv
  cuda::GatedLinearAttentionRows rows_;  // all but the pass's pointers
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfGatedLinearAttention(const ComponentSpec& spec) {
  const GatedLinearAttentionParams p = GatedLinearAttentionParams::From(spec.params);
  std::vector<std::string> in = {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight",
                                 "attn.gk_proj.0.weight"};
  if (p.use_output_gate) in.push_back("attn.g_proj.weight");
  return {{"in", std::move(in), /*matrix=*/true},
          {"conv",  // fp32 [2·key_dim + value_dim, conv_size]: q | k | v's taps
           {"attn.q_conv1d.weight", "attn.k_conv1d.weight", "attn.v_conv1d.weight"}},
          {"conv_bias", {"attn.q_conv1d.bias", "attn.k_conv1d.bias", "attn.v_conv1d.bias"}},
          {"gate_up", {"attn.gk_proj.1.weight"}},
          {"gate_bias", {"attn.gk_proj.1.bias"}},
          {"g_norm", {"attn.g_norm.weight"}},
          {"o", {"attn.o_proj.weight"}, /*matrix=*/true}};
}

std::unique_ptr<CudaMixer> CreateCudaGatedLinearAttention(const CudaLayerContext& context,
                                                          const ComponentSpec& spec,
                                                          const CudaLayerWeights& weights,
                                                          int64_t state_offset) {
  return std::make_unique<CudaGatedLinearAttention>(
      context, GatedLinearAttentionParams::From(spec.params), weights, state_offset);
}

}  // namespace linserve
