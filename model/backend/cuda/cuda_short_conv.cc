// The CUDA implementation of the "short_conv" mixer (model/layers/short_conv.h, Based's
// BaseConv): the in_proj GEMM, the fused bias + causal depthwise convolution + silu + gate of
// kernels/cuda/short_conv.h on the layer's state slice (one launch over the decode rows, one per
// prefill piece), then out_proj.

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/short_conv.h"
#include "model/layers/short_conv.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMixer indices): in_proj's output (u | g, fp32) and the gated
// rows (T), out_proj's input.
enum Buffer { kIn, kGated };

class CudaShortConv final : public CudaMixer {
 public:
  CudaShortConv(const CudaLayerContext& context, const ShortConvParams& p,
                const CudaLayerWeights& w, int64_t state_offset)
      : w_(w),
        gemm_(context.gemm),
        dtype_(context.dtype),
        d_model_(context.model.config.d_model),
        d_inner_(p.d_inner),
        state_offset_(state_offset) {
    shape_.channels = p.d_inner;
    shape_.kernel = p.kernel_size;
    shape_.in_bias = w.conv_in_bias;
    shape_.weight = w.conv_weight;
    shape_.conv_bias = w.conv_bias;
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMixer, kIn, rows * 2 * d_inner_ * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMixer, kGated, rows * d_inner_ * cuda::DTypeSize(dtype_));
  }

  absl::Status Check() const override { return cuda::CheckShortConvShape(shape_); }

  absl::Status Forward(cudaStream_t s, const CudaPass& pass) override {
    const CudaWorkspace& ws = *pass.workspace;
    const int rows = pass.rows;
    float* a = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kIn));
    void* gated = Scratch(ws, ScratchRole::kMixer, kGated);
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, ws.act.xt, w_.conv_in_weight, a, rows, 2 * d_inner_, d_model_));
    if (pass.prefill == nullptr) {
      cuda::DecodeShortConvArgs args;
      args.shape = shape_;
      args.a = a;
      args.slots = ws.device_rows.slots;
      args.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
      args.slot_stride = pass.state_floats;
      args.layer_offset = state_offset_;
      args.rows = rows;
      args.out_dtype = dtype_;
      args.out = gated;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchDecodeShortConv(s, args));
    }
    if (pass.prefill != nullptr) {
      // Every session of the pass in the same launches.
      cuda::PrefillShortConvArgs args;
      args.shape = shape_;
      args.a = a;
      args.tables = *pass.prefill;
      args.state = static_cast<float*>(ws.state);  // fp32: CheckCudaStatePrecision
      args.slot_stride = pass.state_floats;
      args.layer_offset = state_offset_;
      args.out_dtype = dtype_;
      args.out = gated;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchPrefillShortConv(s, args));
    }
    return gemm_.Linear(s, dtype_, gated, w_.conv_out_weight, ws.act.proj, rows, d_model_,
                        d_inner_);
  }

  const float* output_bias() const override { return w_.conv_out_bias; }

 private:
  const CudaLayerWeights w_;
  cuda::Gemm& gemm_;
  const cuda::DType dtype_;
  const int64_t d_model_;
  const int64_t d_inner_;
  const int64_t state_offset_;
  cuda::ShortConvShape shape_;
};

}  // namespace

std::unique_ptr<CudaMixer> CreateCudaShortConv(const CudaLayerContext& context,
                                               const ComponentSpec& spec,
                                               const CudaLayerWeights& weights,
                                               int64_t state_offset) {
  return std::make_unique<CudaShortConv>(context, ShortConvParams::From(spec.params), weights,
                                         state_offset);
}

}  // namespace linserve
