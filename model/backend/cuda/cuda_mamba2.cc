// The CUDA implementation of the "mamba2" mixer (model/layers/mamba2.h), a CudaProjectedMixer:
// one GEMM for in_proj (z | xBC | dt); the convolution on x | B | C (kernels/cuda/short_conv.h,
// ungated, with in_proj's bias where the layer has one, into fp32 scratch); the scan and the
// grouped gated RMSNorm (kernels/cuda/mamba2.h) on the layer's state slice, writing out_proj's
// input; then out_proj. Decode is one launch of each over the batch, a prefill pass one of each
// for all its sessions.

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mamba2.h"
#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_layer.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/mamba2.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMixer indices): x | B | C after the convolution, the scan's y.
constexpr int kConvOut = CudaProjectedMixer::kFirstCoreBuffer;
constexpr int kScan = CudaProjectedMixer::kFirstCoreBuffer + 1;

class CudaMamba2 final : public CudaProjectedMixer {
 public:
  CudaMamba2(const CudaLayerContext& context, const Mamba2Params& p, const CudaLayerWeights& w,
             int64_t state_offset)
      : CudaProjectedMixer(context, state_offset, w.Matrix("in"), p.InColumns(), w.Matrix("o"),
                           p.InnerDim(), w.Vector("o_bias")),
        p_(p) {
    const float* in_bias = w.Vector("in_bias");
    conv_.channels = static_cast<int>(p.ConvChannels());
    conv_.kernel = p.conv_size;
    conv_.weight = w.RequiredVector("conv");
    conv_.conv_bias = w.Vector("conv_bias");
    conv_.in_bias = in_bias != nullptr ? in_bias + p.InnerDim() : nullptr;
    conv_.gated = false;
    conv_.a_stride = p.InColumns();
    cuda::Mamba2Shape& shape = rows_.shape;
    shape.heads = p.n_heads;
    shape.head_dim = p.head_dim;
    shape.state_size = p.state_size;
    shape.groups = p.n_groups;
    shape.d_has_hdim = p.d_has_hdim;
    shape.rmsnorm = p.rmsnorm;
    shape.norm_before_gate = p.norm_before_gate;
    shape.dt_min = static_cast<float>(p.dt_limit_min);
    shape.dt_max = static_cast<float>(p.dt_limit_max);
    shape.min_log_decay = kMamba2MinLogDecay;
    shape.norm_eps = static_cast<float>(p.norm_eps);
    shape.dt_bias = w.RequiredVector("dt_bias");
    shape.a_log = w.RequiredVector("A_log");
    shape.d = w.RequiredVector("D");
    shape.norm = w.Vector("norm");
    shape.in_bias = in_bias;
    rows_.in_stride = p.InColumns();
    rows_.layer_offset = state_offset;
    rows_.out_dtype = dtype_;
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMixer, kConvOut, rows * p.ConvChannels() * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMixer, kScan, rows * p.InnerDim() * sizeof(float));
  }

  absl::Status Check() const override {
    LINSERVE_RETURN_IF_ERROR(cuda::CheckShortConvShape(conv_));
    return cuda::CheckMamba2Shape(rows_.shape);
  }

 private:
  // `in`: in_proj's rows (fp32, without its bias); `out`: out_proj's input (T).
  absl::Status Core(cudaStream_t s, const CudaPass& pass, const float* in, void* out) override {
    const CudaWorkspace& ws = *pass.workspace;
    float* xbc = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kConvOut));
    cuda::Mamba2Rows rows = rows_;
    rows.in = in;
    rows.xbc = xbc;
    rows.state = ws.state;
    rows.state_dtype = ws.state_dtype;
    rows.slot_stride = pass.state_floats;
    rows.y = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kScan));
    rows.out = out;
    const int64_t history = state_offset_ + p_.HistoryOffset();
    const float* a = in + p_.InnerDim();  // xBC follows z in each row
    LINSERVE_RETURN_IF_ERROR(ShortConv(s, pass, conv_, a, history, cuda::DType::kF32, xbc));
    if (pass.prefill == nullptr) {
      return cuda::LaunchDecodeMamba2(s, rows, ws.device_rows.slots, pass.rows);
    }
    return cuda::LaunchPrefillMamba2(s, rows, *pass.prefill);
  }

  const Mamba2Params p_;
  cuda::ShortConvShape conv_;
  cuda::Mamba2Rows rows_;  // all but the pass's pointers
};

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfMamba2(const ComponentSpec&) {
  return {{"in", {"mamba.in_proj.weight"}, /*matrix=*/true},
          {"in_bias", {"mamba.in_proj.bias"}},
          {"conv", {"mamba.conv1d.weight"}},  // fp32 [x | B | C channels, conv_size]
          {"conv_bias", {"mamba.conv1d.bias"}},
          {"dt_bias", {"mamba.dt_bias"}},
          {"A_log", {"mamba.A_log"}},
          {"D", {"mamba.D"}},
          {"norm", {"mamba.norm.weight"}},
          {"o", {"mamba.out_proj.weight"}, /*matrix=*/true},
          {"o_bias", {"mamba.out_proj.bias"}}};
}

std::unique_ptr<CudaMixer> CreateCudaMamba2(const CudaLayerContext& context,
                                            const ComponentSpec& spec,
                                            const CudaLayerWeights& weights, int64_t state_offset) {
  return std::make_unique<CudaMamba2>(context, Mamba2Params::From(spec.params), weights,
                                      state_offset);
}

}  // namespace linserve
