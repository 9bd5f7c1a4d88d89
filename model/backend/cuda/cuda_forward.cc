#include "model/backend/cuda/cuda_forward.h"

#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"

namespace linserve {
namespace {

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

}  // namespace

CudaForward::CudaForward(const ModelConfig& config, cuda::DType dtype, const CudaWeights& weights,
                         const CudaWorkspace& workspace, cuda::Gemm& gemm, CudaLayers layers)
    : config_(config),
      dtype_(dtype),
      state_floats_(config.StateFloatsPerSlot()),
      weights_(weights),
      ws_(workspace),
      gemm_(gemm),
      layers_(std::move(layers)) {}

absl::Status CudaForward::Check() const {
  for (const CudaLayer& layer : layers_.layers) LINSERVE_RETURN_IF_ERROR(layer.mixer->Check());
  return absl::OkStatus();
}

absl::Status CudaForward::Prepare(cudaStream_t s) {
  for (CudaLayer& layer : layers_.layers) LINSERVE_RETURN_IF_ERROR(layer.mixer->Prepare(s));
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueRowInputs(cudaStream_t s, int rows, const RowInputs& host,
                                           bool decode) {
  const RowInputs& dev = ws_.device_rows;
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev.tokens, host.tokens, rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.positions, host.positions,
                                                rows * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev.slots, host.slots, rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  if (decode) {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dev.sources, host.sources, rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  }
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueLayers(cudaStream_t s, int rows,
                                        const cuda::PrefillTables* prefill) {
  const Activations& act = ws_.act;
  const bool pre = config_.norm == NormPlacement::kPre;

  cuda::EmbedArgs embed;
  embed.tokens = ws_.device_rows.tokens;
  if (prefill == nullptr) {
    embed.sources = ws_.device_rows.sources;
    embed.fed_tokens = ws_.decode_picks;
  }
  embed.positions = ws_.device_rows.positions;
  embed.table = weights_.embedding;
  embed.position = ToKernel(config_.position);
  embed.position_table = weights_.position_embedding;
  embed.rows = rows;
  embed.d = config_.d_model;
  embed.dtype = dtype_;
  embed.x = act.x;
  embed.x_t = pre ? nullptr : act.xt;  // post-norm: the first GEMM reads x itself
  const std::vector<CudaLayer>& layers = layers_.layers;
  if (pre) {  // the first norm, in the embedding's kernel
    embed.normalize = true;
    embed.norm = layers[0].norm1->Args(act, rows, pre);
  }
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchEmbed(s, embed));

  // Per layer (docs/architecture.md §4), each residual add fused into the norm after it:
  //   pre-norm:  x += mixer(norm1(x)); x += mlp(norm2(x)), the next norm1 (or the final norm)
  //              normalising x for the next input;
  //   post-norm: x = norm1(x + mixer(x)); x = norm2(x + mlp(x)).
  // A layer without an MLP (kind "none") adds its mixer's output into the norm that follows it.
  const CudaPass pass{
      .rows = rows, .prefill = prefill, .workspace = &ws_, .state_floats = state_floats_};
  // Each mixer and MLP runs the norm after it (Gemm::LinearAddNorm).
  for (size_t l = 0; l < layers.size(); ++l) {
    const CudaLayer& layer = layers[l];
    const bool last = l + 1 == layers.size();
    // The norm after the layer in a pre-norm model: the next layer's first, or the final norm.
    const CudaNorm* next = !pre   ? nullptr
                           : last ? layers_.final_norm.get()
                                  : layers[l + 1].norm1.get();
    if (layer.mlp == nullptr) {
      const CudaNorm& after = pre ? *next : *layer.norm1;
      LINSERVE_RETURN_IF_ERROR(layer.mixer->Forward(s, pass, after.Args(act, rows, pre)));
      continue;
    }
    const CudaNorm& after_mixer = pre ? *layer.norm2 : *layer.norm1;
    LINSERVE_RETURN_IF_ERROR(layer.mixer->Forward(s, pass, after_mixer.Args(act, rows, pre)));
    const CudaNorm& after_mlp = pre ? *next : *layer.norm2;
    LINSERVE_RETURN_IF_ERROR(layer.mlp->Forward(s, ws_, rows, after_mlp.Args(act, rows, pre)));
  }
  return absl::OkStatus();
}

absl::Status CudaForward::EnqueueHead(cudaStream_t s, int64_t first_row, int64_t rows,
                                      float* logits) {
  const int64_t d = config_.d_model;
  void* input = static_cast<char*>(ws_.act.xt) +
                first_row * d * static_cast<int64_t>(cuda::DTypeSize(dtype_));
  // Over the padded rows of the head, so the logits' row stride stays aligned; the pad columns
  // come out zero and are never read.
  return gemm_.Linear(s, dtype_, input, weights_.head, logits, rows, weights_.padded_vocab, d);
}

absl::Status CudaForward::EnqueueLogitsToHost(cudaStream_t s, int64_t rows, float* host) {
  const size_t vocab_bytes = static_cast<size_t>(config_.vocab_size) * sizeof(float);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      host, vocab_bytes, ws_.act.logits, static_cast<size_t>(ws_.act.logits_stride) * sizeof(float),
      vocab_bytes, static_cast<size_t>(rows), cudaMemcpyDeviceToHost, s));
  return absl::OkStatus();
}

}  // namespace linserve
