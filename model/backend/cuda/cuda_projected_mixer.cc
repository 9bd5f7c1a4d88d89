#include "model/backend/cuda/cuda_projected_mixer.h"

#include "kernels/cuda/cuda_status.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMixer indices) before kFirstCoreBuffer.
enum Buffer { kIn, kOut };

}  // namespace

std::vector<CudaTensorGroup> CudaQkvoTensors(const std::string& prefix) {
  return {{"qkv",
           {prefix + ".q_proj.weight", prefix + ".k_proj.weight", prefix + ".v_proj.weight"},
           /*matrix=*/true},
          {"qkv_bias", {prefix + ".q_proj.bias", prefix + ".k_proj.bias", prefix + ".v_proj.bias"}},
          {"o", {prefix + ".o_proj.weight"}, /*matrix=*/true},
          {"o_bias", {prefix + ".o_proj.bias"}}};
}

CudaProjectedMixer::CudaProjectedMixer(const CudaLayerContext& context, int64_t state_offset,
                                       const void* in_weight, int64_t in_columns,
                                       const void* out_weight, int64_t core_columns,
                                       const float* out_bias)
    : dtype_(context.dtype),
      state_offset_(state_offset),
      gemm_(context.gemm),
      d_model_(context.model.config.d_model),
      in_weight_(in_weight),
      in_columns_(in_columns),
      out_weight_(out_weight),
      core_columns_(core_columns),
      out_bias_(out_bias) {
  static_assert(kOut + 1 == kFirstCoreBuffer);
  const size_t rows = static_cast<size_t>(context.max_rows);
  context.scratch.Reserve(ScratchRole::kMixer, kIn, rows * in_columns_ * sizeof(float));
  context.scratch.Reserve(ScratchRole::kMixer, kOut,
                          rows * core_columns_ * cuda::DTypeSize(dtype_));
}

absl::Status CudaProjectedMixer::Forward(cudaStream_t s, const CudaPass& pass,
                                         const cuda::AddNormArgs& then) {
  const CudaWorkspace& ws = *pass.workspace;
  float* in = static_cast<float*>(Scratch(ws, ScratchRole::kMixer, kIn));
  void* out = Scratch(ws, ScratchRole::kMixer, kOut);
  LINSERVE_RETURN_IF_ERROR(
      gemm_.Linear(s, dtype_, ws.act.xt, in_weight_, in, pass.rows, in_columns_, d_model_));
  LINSERVE_RETURN_IF_ERROR(Core(s, pass, in, out));
  cuda::AddNormArgs add_norm = then;
  add_norm.delta_bias = out_bias_;
  return gemm_.LinearAddNorm(s, dtype_, out, out_weight_, ws.act.proj, pass.rows, d_model_,
                             core_columns_, add_norm);
}

absl::Status CudaProjectedMixer::ShortConv(cudaStream_t stream, const CudaPass& pass,
                                           const cuda::ShortConvShape& shape, const float* a,
                                           int64_t layer_offset, cuda::DType out_dtype, void* out) {
  void* state = pass.workspace->state;
  const cuda::DType state_dtype = pass.workspace->state_dtype;
  if (pass.prefill == nullptr) {
    cuda::DecodeShortConvArgs args;
    args.shape = shape;
    args.a = a;
    args.slots = pass.workspace->device_rows.slots;
    args.state = state;
    args.state_dtype = state_dtype;
    args.slot_stride = pass.state_floats;
    args.layer_offset = layer_offset;
    args.rows = pass.rows;
    args.out_dtype = out_dtype;
    args.out = out;
    return cuda::LaunchDecodeShortConv(stream, args);
  }
  cuda::PrefillShortConvArgs args;
  args.shape = shape;
  args.a = a;
  args.tables = *pass.prefill;
  args.state = state;
  args.state_dtype = state_dtype;
  args.slot_stride = pass.state_floats;
  args.layer_offset = layer_offset;
  args.out_dtype = out_dtype;
  args.out = out;
  return cuda::LaunchPrefillShortConv(stream, args);
}

}  // namespace linserve
