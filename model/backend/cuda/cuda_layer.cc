#include "model/backend/cuda/cuda_layer.h"

#include <cstdlib>

#include "model/backend/cuda/cuda_ffn.h"
#include "model/backend/cuda/cuda_gated_mlp.h"
#include "model/backend/cuda/cuda_layer_norm.h"
#include "model/backend/cuda/cuda_linear_attention.h"
#include "model/backend/cuda/cuda_rms_norm.h"
#include "model/backend/cuda/cuda_short_conv.h"
#include "model/backend/cuda/cuda_sliding_window_attention.h"
#include "model/backend/cuda/cuda_taylor_linear_attention.h"
#include "model/layers/ffn.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear_attention.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/sliding_window_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {
namespace {

// The CUDA implementation of each kind, by name. Every kind of model/layers/kinds.cc has one
// (CudaBackendTest.ModelVariantsUseEveryLayerKind and the parity tests over those variants), so
// a kind the parser accepts but this table lacks is a bug, not bad input.
std::unique_ptr<CudaMixer> CreateMixer(const CudaLayerContext& context, const ComponentSpec& spec,
                                       const CudaLayerWeights& weights, int64_t state_offset) {
  if (spec.kind == LinearAttentionKind().name) {
    return CreateCudaLinearAttention(context, spec, weights, state_offset);
  }
  if (spec.kind == ShortConvKind().name) {
    return CreateCudaShortConv(context, spec, weights, state_offset);
  }
  if (spec.kind == TaylorLinearAttentionKind().name) {
    return CreateCudaTaylorLinearAttention(context, spec, weights, state_offset);
  }
  if (spec.kind == SlidingWindowAttentionKind().name) {
    return CreateCudaSlidingWindowAttention(context, spec, weights, state_offset);
  }
  std::abort();
}

std::unique_ptr<CudaNorm> CreateNorm(const CudaLayerContext& context, const ComponentSpec& spec,
                                     const float* scale, const float* shift) {
  if (spec.kind == LayerNormKind().name) return CreateCudaLayerNorm(context, spec, scale, shift);
  if (spec.kind == RmsNormKind().name) return CreateCudaRmsNorm(context, spec, scale);
  std::abort();
}

std::unique_ptr<CudaMlp> CreateMlp(const CudaLayerContext& context, const ComponentSpec& spec,
                                   const CudaLayerWeights& weights) {
  if (spec.kind == FfnKind().name) return CreateCudaFfn(context, spec, weights);
  if (spec.kind == GatedMlpKind().name) return CreateCudaGatedMlp(context, spec, weights);
  std::abort();
}

}  // namespace

cuda::AddNormArgs ResidualNormArgs(const Activations& act, int rows, bool pre, const float* delta,
                                   const float* delta_bias, int d_model, cuda::DType dtype) {
  cuda::AddNormArgs a;
  a.x = act.x;
  a.delta = delta;
  a.delta_bias = delta_bias;
  a.y_t = act.xt;
  a.rows = rows;
  a.d = d_model;
  a.dtype = dtype;
  if (pre) {
    a.sum_out = act.x;  // x += delta; the normalised copy only feeds the next GEMM
  } else {
    a.y = act.x;  // x = norm(x + delta)
  }
  return a;
}

CudaLayers CreateCudaLayers(const CudaLayerContext& context, const CudaWeights& weights) {
  const ModelConfig& config = context.model.config;
  const std::vector<LayerSpec> specs = config.LayerList();
  const std::vector<int64_t> offsets = config.StateOffsets();
  CudaLayers out;
  out.layers.reserve(specs.size());
  for (size_t l = 0; l < specs.size(); ++l) {
    const LayerSpec& spec = specs[l];
    const CudaLayerWeights& lw = weights.layers[l];
    out.layers.push_back(
        CudaLayer{.norm1 = CreateNorm(context, spec.norm, lw.ln1_weight, lw.ln1_bias),
                  .norm2 = CreateNorm(context, spec.norm, lw.ln2_weight, lw.ln2_bias),
                  .mixer = CreateMixer(context, spec.mixer, lw, offsets[l]),
                  .mlp = CreateMlp(context, spec.mlp, lw)});
  }
  if (config.norm == NormPlacement::kPre) {
    out.final_norm =
        CreateNorm(context, config.FinalNorm(), weights.final_norm_weight, weights.final_norm_bias);
  }
  return out;
}

}  // namespace linserve
