#include "model/backend/cuda/cuda_forward.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"

namespace linserve {
namespace {

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

cuda::ActivationKind ToKernel(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return cuda::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cuda::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cuda::ActivationKind::kRelu;
  }
  return cuda::ActivationKind::kGelu;
}

cuda::PositionKind ToKernel(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::kLearned:
      return cuda::PositionKind::kLearned;
    case PositionEmbedding::kSinusoidal:
      return cuda::PositionKind::kSinusoidal;
    case PositionEmbedding::kNone:
      return cuda::PositionKind::kNone;
  }
  return cuda::PositionKind::kNone;
}

cuda::AttentionShape AttentionShapeOf(const ModelConfig& config, const float* favor) {
  cuda::AttentionShape shape;
  shape.heads = config.n_heads;
  shape.head_dim = config.head_dim;
  shape.feature_dim = config.feature_dim;
  shape.feature_map = ToKernel(config.feature_map);
  shape.favor = favor;
  shape.eps = static_cast<float>(config.attention_eps);
  return shape;
}

}  // namespace

CudaForward::CudaForward(const ModelConfig& config, cuda::DType dtype, int prefill_chunk,
                         const CudaWeights& weights, const CudaWorkspace& workspace,
                         cuda::Gemm& gemm)
    : config_(config),
      dtype_(dtype),
      prefill_chunk_(prefill_chunk),
      state_floats_(config.StateFloatsPerSlot()),
      layer_floats_(static_cast<int64_t>(config.n_heads) * config.feature_dim *
                    (config.head_dim + 1)),
      weights_(weights),
      ws_(workspace),
      gemm_(gemm) {}

int64_t CudaForward::PrefillScratchFloats(const ModelConfig& config, int rows, int prefill_chunk) {
  return cuda::PrefillAttentionScratchFloats(AttentionShapeOf(config, nullptr), rows,
                                             prefill_chunk);
}

cuda::AttentionShape CudaForward::Shape(int layer) const {
  return AttentionShapeOf(config_, weights_.layers[static_cast<size_t>(layer)].favor);
}

absl::Status CudaForward::CheckShapes() const {
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    LINSERVE_RETURN_IF_ERROR(cuda::CheckAttentionShape(Shape(layer)));
  }
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueRowInputs(cudaStream_t s, int rows) {
  const RowInputs& host = ws_.host_rows;
  const RowInputs& dev = ws_.device_rows;
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev.tokens, host.tokens, rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.positions, host.positions,
                                                rows * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev.slots, host.slots, rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueLayers(cudaStream_t s, int rows,
                                        absl::Span<const PrefillPiece> pieces) {
  const Activations& act = ws_.act;
  const int64_t d = config_.d_model;
  const int64_t hd = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const int64_t ff = config_.d_ff;
  const bool pre = config_.norm == NormPlacement::kPre;
  const float ln_eps = static_cast<float>(config_.layer_norm_eps);

  cuda::EmbedArgs embed;
  embed.tokens = ws_.device_rows.tokens;
  embed.positions = ws_.device_rows.positions;
  embed.table = weights_.embedding;
  embed.position = ToKernel(config_.position);
  embed.position_table = weights_.position_embedding;
  embed.rows = rows;
  embed.d = config_.d_model;
  embed.dtype = dtype_;
  embed.x = act.x;
  embed.x_t = pre ? nullptr : act.xt;  // post-norm: the first GEMM reads x itself
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchEmbed(s, embed));

  auto layer_norm = [&](const float* delta, const float* delta_bias, const float* gamma,
                        const float* beta) {
    cuda::AddLayerNormArgs a;
    a.x = act.x;
    a.delta = delta;
    a.delta_bias = delta_bias;
    a.gamma = gamma;
    a.beta = beta;
    a.eps = ln_eps;
    a.y_t = act.xt;
    a.rows = rows;
    a.d = config_.d_model;
    a.dtype = dtype_;
    if (pre) {
      a.sum_out = act.x;  // x += delta; the normalised copy only feeds the next GEMM
    } else {
      a.y = act.x;  // x = LN(x + delta)
    }
    return cuda::LaunchAddLayerNorm(s, a);
  };

  const std::vector<CudaLayerWeights>& layers = weights_.layers;
  if (pre) {
    LINSERVE_RETURN_IF_ERROR(
        layer_norm(nullptr, nullptr, layers[0].ln1_weight, layers[0].ln1_bias));
  }
  for (int l = 0; l < config_.n_layers; ++l) {
    const CudaLayerWeights& w = layers[static_cast<size_t>(l)];
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, act.xt, w.qkv_weight, act.qkv, rows, 3 * hd, d));
    if (pieces.empty()) {
      cuda::DecodeAttentionArgs a;
      a.shape = Shape(l);
      a.qkv = act.qkv;
      a.qkv_bias = w.qkv_bias;
      a.slots = ws_.device_rows.slots;
      a.state = ws_.state;
      a.slot_stride = state_floats_;
      a.layer_offset = l * layer_floats_;
      a.rows = rows;
      a.out_dtype = dtype_;
      a.out = act.attn;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchDecodeAttention(s, a));
    }
    // One launch per session, in stream order (they share the scratch).
    for (const PrefillPiece& piece : pieces) {
      cuda::PrefillAttentionArgs a;
      a.shape = Shape(l);
      a.qkv = act.qkv + piece.first_row * 3 * hd;
      a.qkv_bias = w.qkv_bias;
      a.state = ws_.state + piece.slot * state_floats_ + l * layer_floats_;
      a.tokens = piece.rows;
      a.chunk = prefill_chunk_;
      a.scratch = act.attention_scratch;
      a.out_dtype = dtype_;
      a.out = RowPtr(act.attn, piece.first_row, hd);
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchPrefillAttention(s, a));
    }
    LINSERVE_RETURN_IF_ERROR(gemm_.Linear(s, dtype_, act.attn, w.o_weight, act.proj, rows, d, hd));
    LINSERVE_RETURN_IF_ERROR(pre ? layer_norm(act.proj, w.o_bias, w.ln2_weight, w.ln2_bias)
                                 : layer_norm(act.proj, w.o_bias, w.ln1_weight, w.ln1_bias));
    LINSERVE_RETURN_IF_ERROR(gemm_.Linear(s, dtype_, act.xt, w.fc1_weight, act.ff, rows, ff, d));
    LINSERVE_RETURN_IF_ERROR(cuda::LaunchBiasActivation(
        s, act.ff, w.fc1_bias, rows, ff, ToKernel(config_.activation), dtype_, act.fft));
    LINSERVE_RETURN_IF_ERROR(gemm_.Linear(s, dtype_, act.fft, w.fc2_weight, act.proj, rows, d, ff));
    if (pre) {
      const bool last = l + 1 == config_.n_layers;
      const CudaLayerWeights& next = layers[static_cast<size_t>(last ? l : l + 1)];
      LINSERVE_RETURN_IF_ERROR(layer_norm(act.proj, w.fc2_bias,
                                          last ? weights_.final_norm_weight : next.ln1_weight,
                                          last ? weights_.final_norm_bias : next.ln1_bias));
    } else {
      LINSERVE_RETURN_IF_ERROR(layer_norm(act.proj, w.fc2_bias, w.ln2_weight, w.ln2_bias));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueHead(cudaStream_t s, int64_t first_row, int64_t rows,
                                      float* logits) {
  const int64_t d = config_.d_model;
  return gemm_.Linear(s, dtype_, RowPtr(ws_.act.xt, first_row, d), weights_.head, logits, rows,
                      config_.vocab_size, d);
}

}  // namespace linserve
