// The CUDA implementation of the "short_conv" mixer (model/layers/short_conv.h, Based's
// BaseConv), a CudaProjectedMixer: the in_proj GEMM, the fused bias + causal depthwise
// convolution + silu + gate of kernels/cuda/short_conv.h on the layer's state slice (one launch
// over the decode rows, one per prefill pass), then out_proj.

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/short_conv.h"

namespace linserve {
namespace {

class CudaShortConv final : public CudaProjectedMixer {
 public:
  CudaShortConv(const CudaLayerContext& context, const ShortConvParams& p,
                const CudaLayerWeights& w, int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("in"), 2 * int64_t{p.d_inner},
                           w.Matrix("out"), p.d_inner, w.Vector("out_bias")) {
    shape_.channels = p.d_inner;
    shape_.kernel = p.kernel_size;
    shape_.in_bias = w.Vector("in_bias");
    shape_.weight = w.RequiredVector("conv");
    shape_.conv_bias = w.Vector("conv_bias");
  }

  absl::Status Check() const override { return cuda::CheckShortConvShape(shape_); }

 private:
  // `a`: in_proj's rows (u | g, fp32); `gated`: out_proj's input (T).
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* a, void* gated) override {
    return ShortConv(s, pass, shape_, a, state_offset_, dtype_, gated);
  }

  cuda::ShortConvShape shape_;
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfShortConv(const ComponentSpec&) {
  return {{"in", {"conv.in_proj.weight"}, /*matrix=*/true},
          {"in_bias", {"conv.in_proj.bias"}},
          {"conv", {"conv.weight"}},  // fp32 [d_inner, kernel_size]
          {"conv_bias", {"conv.bias"}},
          {"out", {"conv.out_proj.weight"}, /*matrix=*/true},
          {"out_bias", {"conv.out_proj.bias"}}};
}

std::unique_ptr<CudaMixer> CreateCudaShortConv(const CudaLayerContext& context,
                                               const ComponentSpec& spec,
                                               const CudaLayerWeights& weights,
                                               int64_t state_offset) {
  return std::make_unique<CudaShortConv>(context, ShortConvParams::From(spec.params), weights,
                                         state_offset);
}

}  // namespace linserve
