#include "model/backend/cuda/cuda_linear_attention.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/linear_attention.h"

namespace linserve {
namespace {

// Scratch buffer (ScratchRole::kMixer index) of the chunked prefill.
constexpr int kPrefill = CudaProjectedMixer::kFirstCoreBuffer;

cuda::FeatureMapKind ToKernel(FeatureMap m) {
  switch (m) {
    case FeatureMap::kEluPlusOne:
      return cuda::FeatureMapKind::kEluPlusOne;
    case FeatureMap::kRelu:
      return cuda::FeatureMapKind::kRelu;
    case FeatureMap::kExp:
      return cuda::FeatureMapKind::kExp;
    case FeatureMap::kFavorPlus:
      return cuda::FeatureMapKind::kFavorPlus;
  }
  return cuda::FeatureMapKind::kEluPlusOne;
}

class CudaLinearAttention final : public CudaProjectedMixer {
 public:
  CudaLinearAttention(const CudaLayerContext& context, const cuda::AttentionShape& shape,
                      const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("qkv"), cuda::QkvColumns(shape),
                           w.Matrix("o"), static_cast<int64_t>(shape.heads) * shape.head_dim,
                           w.Vector("o_bias")),
        qkv_bias_(w.Vector("qkv_bias")),
        chunk_(context.options.prefill_chunk_size),
        shape_(shape) {
    context.scratch.Reserve(
        ScratchRole::kMixer, kPrefill,
        cuda::PrefillAttentionScratchFloats(shape_, context.segment, chunk_) * sizeof(float));
  }

  absl::Status Check() const override { return cuda::CheckAttentionShape(shape_); }

 private:
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* qkv, void* attn) override {
    const CudaWorkspace& ws = *pass.workspace;
    if (pass.prefill == nullptr) {
      cuda::DecodeAttentionArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = qkv_bias_;
      a.slots = ws.device_rows.slots;
      a.state = ws.state;
      a.state_dtype = ws.state_dtype;
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.rows = pass.rows;
      a.out_dtype = dtype_;
      a.out = attn;
      return cuda::LaunchDecodeAttention(s, a);
    }
    // Every session of the pass in the same launches.
    cuda::PrefillAttentionArgs a;
    a.shape = shape_;
    a.qkv = qkv;
    a.qkv_bias = qkv_bias_;
    a.tables = *pass.prefill;
    a.state = ws.state;
    a.state_dtype = ws.state_dtype;
    a.slot_stride = pass.state_floats;
    a.layer_offset = state_offset_;
    a.scratch = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kPrefill));
    a.out_dtype = dtype_;
    a.out = attn;
    return cuda::LaunchPrefillAttention(s, a);
  }

  const float* const qkv_bias_;  // null: none
  const int chunk_;
  const cuda::AttentionShape shape_;
};

}  // namespace

std::unique_ptr<CudaMixer> CreateCudaAttentionMixer(const CudaLayerContext& context,
                                                    const cuda::AttentionShape& shape,
                                                    const CudaLayerWeights& weights,
                                                    int64_t state_offset) {
  return std::make_unique<CudaLinearAttention>(context, shape, weights, state_offset);
}

std::vector<CudaTensorGroup> CudaTensorsOfLinearAttention(const ComponentSpec&) {
  std::vector<CudaTensorGroup> groups = CudaQkvoTensors("attn");
  groups.push_back({"favor", {"attn.favor_projection"}});
  return groups;
}

std::unique_ptr<CudaMixer> CreateCudaLinearAttention(const CudaLayerContext& context,
                                                     const ComponentSpec& spec,
                                                     const CudaLayerWeights& weights,
                                                     int64_t state_offset) {
  const LinearAttentionParams p = LinearAttentionParams::From(spec.params);
  cuda::AttentionShape shape;
  shape.heads = p.n_heads;
  shape.key_dim = p.head_dim;
  shape.head_dim = p.head_dim;
  shape.feature_dim = p.feature_dim;
  shape.feature_map = ToKernel(p.feature_map);
  shape.favor = weights.Vector("favor");
  shape.eps = static_cast<float>(p.eps);
  return CreateCudaAttentionMixer(context, shape, weights, state_offset);
}

}  // namespace linserve
