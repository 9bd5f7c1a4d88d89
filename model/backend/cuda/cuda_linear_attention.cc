#include "model/backend/cuda/cuda_linear_attention.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/linear_attention.h"
#include "model/layers/linear_attention.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMixer indices).
enum Buffer { kQkv, kAttn, kPrefill };

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

class CudaLinearAttention final : public CudaMixer {
 public:
  CudaLinearAttention(const CudaLayerContext& context, const cuda::AttentionShape& shape,
                      const CudaLayerWeights& w, int64_t state_offset)
      : w_(w),
        gemm_(context.gemm),
        dtype_(context.dtype),
        chunk_(context.options.prefill_chunk_size),
        d_model_(context.model.config.d_model),
        hd_(static_cast<int64_t>(shape.heads) * shape.head_dim),
        qkv_columns_(cuda::QkvColumns(shape)),
        state_offset_(state_offset),
        shape_(shape) {
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMixer, kQkv, rows * qkv_columns_ * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMixer, kAttn, rows * hd_ * cuda::DTypeSize(dtype_));
    context.scratch.Reserve(
        ScratchRole::kMixer, kPrefill,
        cuda::PrefillAttentionScratchFloats(shape_, context.segment, chunk_) * sizeof(float));
  }

  absl::Status Check() const override { return cuda::CheckAttentionShape(shape_); }

  absl::Status Forward(cudaStream_t s, const CudaPass& pass) override {
    const CudaWorkspace& ws = *pass.workspace;
    const int rows = pass.rows;
    float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kQkv));
    void* attn = Scratch(ws, ScratchRole::kMixer, kAttn);
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, ws.act.xt, w_.qkv_weight, qkv, rows, qkv_columns_, d_model_));
    if (pass.prefill == nullptr) {
      cuda::DecodeAttentionArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = w_.qkv_bias;
      a.slots = ws.device_rows.slots;
      a.state = ws.state;
      a.state_dtype = ws.state_dtype;
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.rows = rows;
      a.out_dtype = dtype_;
      a.out = attn;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchDecodeAttention(s, a));
    }
    if (pass.prefill != nullptr) {
      // Every session of the pass in the same launches.
      cuda::PrefillAttentionArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = w_.qkv_bias;
      a.tables = *pass.prefill;
      a.state = ws.state;
      a.state_dtype = ws.state_dtype;
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.scratch = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kPrefill));
      a.out_dtype = dtype_;
      a.out = attn;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchPrefillAttention(s, a));
    }
    return gemm_.Linear(s, dtype_, attn, w_.o_weight, ws.act.proj, rows, d_model_, hd_);
  }

  const float* output_bias() const override { return w_.o_bias; }

 private:
  const CudaLayerWeights w_;
  cuda::Gemm& gemm_;
  const cuda::DType dtype_;
  const int chunk_;
  const int64_t d_model_;
  const int64_t hd_;           // n_heads · head_dim
  const int64_t qkv_columns_;  // of the fused q/k/v GEMM's output
  const int64_t state_offset_;
  const cuda::AttentionShape shape_;
};

}  // namespace

std::unique_ptr<CudaMixer> CreateCudaAttentionMixer(const CudaLayerContext& context,
                                                    const cuda::AttentionShape& shape,
                                                    const CudaLayerWeights& weights,
                                                    int64_t state_offset) {
  return std::make_unique<CudaLinearAttention>(context, shape, weights, state_offset);
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
  shape.favor = weights.favor;
  shape.eps = static_cast<float>(p.eps);
  return CreateCudaAttentionMixer(context, shape, weights, state_offset);
}

}  // namespace linserve
