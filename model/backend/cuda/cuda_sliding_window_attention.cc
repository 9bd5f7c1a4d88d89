// The CUDA implementation of the "sliding_window_attention" mixer
// (model/layers/sliding_window_attention.h): one fused q/k/v GEMM, the kernels of
// kernels/cuda/sliding_window_attention.h on the layer's state slice (the ring of past keys and
// values; one decode launch over the batch, the prefill launches once for a pass's sessions;
// the rotation table filled once, at Prepare), then o_proj.

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/sliding_window_attention.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/sliding_window_attention.h"

namespace linserve {
namespace {

class CudaSlidingWindowAttention final : public CudaProjectedMixer {
 public:
  CudaSlidingWindowAttention(const CudaLayerContext& context, const SlidingWindowAttentionParams& p,
                             const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("qkv"),
                           3 * static_cast<int64_t>(p.n_heads) * p.head_dim, w.Matrix("o"),
                           static_cast<int64_t>(p.n_heads) * p.head_dim, w.Vector("o_bias")),
        qkv_bias_(w.Vector("qkv_bias")) {
    shape_.heads = p.n_heads;
    shape_.head_dim = p.head_dim;
    shape_.window = p.window;
    shape_.rotary_dim = p.rotary_dim;
    shape_.rope_base = p.rope_base;
  }

  absl::Status Check() const override { return cuda::CheckSlidingWindowShape(shape_); }

  // The rotation table, once: it depends on the shape alone.
  absl::Status Prepare(cudaStream_t s) override {
    const int64_t floats = cuda::SlidingWindowRotationFloats(shape_);
    if (floats == 0) return absl::OkStatus();
    absl::StatusOr<cuda::DeviceBuffer> table = cuda::DeviceBuffer::Allocate(
        static_cast<size_t>(floats) * sizeof(float), "a sliding window's rotation table");
    if (!table.ok()) return table.status();
    rotation_ = *std::move(table);
    return cuda::LaunchSlidingWindowRotationTable(s, shape_, rotation_.as<float>());
  }

 private:
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* qkv, void* attn) override {
    const CudaWorkspace& ws = *pass.workspace;
    const float* rotation = rotation_.as<float>();  // null: no rotary dims
    if (pass.prefill == nullptr) {
      cuda::SlidingWindowDecodeArgs a;
      a.shape = shape_;
      a.qkv = qkv;
      a.qkv_bias = qkv_bias_;
      a.slots = ws.device_rows.slots;
      a.rotation = rotation;
      a.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
      a.slot_stride = pass.state_floats;
      a.layer_offset = state_offset_;
      a.rows = pass.rows;
      a.out_dtype = dtype_;
      a.out = attn;
      return cuda::LaunchSlidingWindowDecode(s, a);
    }
    // Every session of the pass in the same launches.
    cuda::SlidingWindowPrefillArgs a;
    a.shape = shape_;
    a.qkv = qkv;
    a.qkv_bias = qkv_bias_;
    a.tables = *pass.prefill;
    a.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
    a.slot_stride = pass.state_floats;
    a.layer_offset = state_offset_;
    a.rotation = rotation;
    a.out_dtype = dtype_;
    a.out = attn;
    return cuda::LaunchSlidingWindowPrefill(s, a);
  }

  const float* const qkv_bias_;  // null: none
  cuda::SlidingWindowShape shape_;
  cuda::DeviceBuffer rotation_;  // Prepare's table
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfSlidingWindowAttention(const ComponentSpec&) {
  return CudaQkvoTensors("attn");
}

std::unique_ptr<CudaMixer> CreateCudaSlidingWindowAttention(const CudaLayerContext& context,
                                                            const ComponentSpec& spec,
                                                            const CudaLayerWeights& weights,
                                                            int64_t state_offset) {
  return std::make_unique<CudaSlidingWindowAttention>(
      context, SlidingWindowAttentionParams::From(spec.params), weights, state_offset);
}

}  // namespace linserve
