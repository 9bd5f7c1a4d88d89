// The CUDA implementation of the "sliding_window_attention" mixer
// (model/layers/sliding_window_attention.h): one fused q/k/v GEMM, the kernels of
// kernels/cuda/sliding_window_attention.h on the layer's state slice (the ring of past keys and
// values; one decode launch over the batch, the prefill launches once for a pass's sessions),
// then o_proj.

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/sliding_window_attention.h"
#include "model/layers/sliding_window_attention.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMixer indices).
enum Buffer { kQkv, kAttn, kRotation };

class CudaSlidingWindowAttention final : public CudaMixer {
 public:
  CudaSlidingWindowAttention(const CudaLayerContext& context, const SlidingWindowAttentionParams& p,
                             const CudaLayerWeights& w, int64_t state_offset)
      : w_(w),
        gemm_(context.gemm),
        dtype_(context.dtype),
        d_model_(context.model.config.d_model),
        hd_(static_cast<int64_t>(p.n_heads) * p.head_dim),
        state_offset_(state_offset) {
    shape_.heads = p.n_heads;
    shape_.head_dim = p.head_dim;
    shape_.window = p.window;
    shape_.rotary_dim = p.rotary_dim;
    shape_.rope_base = p.rope_base;
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMixer, kQkv, rows * 3 * hd_ * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMixer, kAttn, rows * hd_ * cuda::DTypeSize(dtype_));
    context.scratch.Reserve(
        ScratchRole::kMixer, kRotation,
        static_cast<size_t>(cuda::SlidingWindowRotationFloats(shape_)) * sizeof(float));
  }

  absl::Status Check() const override { return cuda::CheckSlidingWindowShape(shape_); }

  absl::Status Forward(cudaStream_t s, const CudaPass& pass) override {
    const CudaWorkspace& ws = *pass.workspace;
    const int rows = pass.rows;
    float* qkv = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kQkv));
    void* attn = Scratch(ws, ScratchRole::kMixer, kAttn);
    float* rotation = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kRotation));
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, ws.act.xt, w_.qkv_weight, qkv, rows, 3 * hd_, d_model_));
    if (pass.prefill == nullptr) {
      cuda::SlidingWindowDecodeArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = w_.qkv_bias;
      a.slots = ws.device_rows.slots;
      a.rotation = rotation;
      a.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.rows = rows;
      a.out_dtype = dtype_;
      a.out = attn;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchSlidingWindowDecode(s, a));
    }
    if (pass.prefill != nullptr) {
      // Every session of the pass in the same launches.
      cuda::SlidingWindowPrefillArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = w_.qkv_bias;
      a.tables = *pass.prefill;
      a.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.rotation = rotation;
      a.out_dtype = dtype_;
      a.out = attn;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchSlidingWindowPrefill(s, a));
    }
    return gemm_.Linear(s, dtype_, attn, w_.o_weight, ws.act.proj, rows, d_model_, hd_);
  }

  const float* output_bias() const override { return w_.o_bias; }

 private:
  const CudaLayerWeights w_;
  cuda::Gemm& gemm_;
  const cuda::DType dtype_;
  const int64_t d_model_;
  const int64_t hd_;  // n_heads · head_dim
  const int64_t state_offset_;
  cuda::SlidingWindowShape shape_;
};

}  // namespace

std::unique_ptr<CudaMixer> CreateCudaSlidingWindowAttention(const CudaLayerContext& context,
                                                            const ComponentSpec& spec,
                                                            const CudaLayerWeights& weights,
                                                            int64_t state_offset) {
  return std::make_unique<CudaSlidingWindowAttention>(
      context, SlidingWindowAttentionParams::From(spec.params), weights, state_offset);
}

}  // namespace linserve
