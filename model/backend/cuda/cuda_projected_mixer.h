// CudaProjectedMixer: the shape every mixer kind has on CUDA, written once (as
// CpuProjectedMixer is on the CPU). One GEMM of the pass's rows (act.xt) by the kind's input
// projections, fused into one matrix, into fp32 scratch; a core that mixes positions over those
// rows, advances each slot's slice of the state and writes its rows in the weights' type; the
// output GEMM into act.proj, with the following residual add + norm (which adds its bias).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_PROJECTED_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_PROJECTED_MIXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/short_conv.h"
#include "model/backend/cuda/cuda_layer.h"

namespace linserve {

// The device groups of a mixer whose input projections are `<prefix>.q_proj`, `.k_proj` and
// `.v_proj` and whose output is `<prefix>.o_proj`: "qkv" (the three matrices' rows, q then k then
// v), "qkv_bias" (their biases), "o" and "o_bias".
std::vector<CudaTensorGroup> CudaQkvoTensors(const std::string& prefix);

class CudaProjectedMixer : public CudaMixer {
 public:
  // The first ScratchRole::kMixer buffer a core may Reserve: those before it hold the
  // projections' rows and the core's output.
  static constexpr int kFirstCoreBuffer = 2;

  // in_weight: T [in_columns, d_model], the input projections' rows one after the other;
  // out_weight: T [d_model, core_columns]; out_bias: fp32 [d_model] or null.
  CudaProjectedMixer(const CudaLayerContext& context, int64_t state_offset, const void* in_weight,
                     int64_t in_columns, const void* out_weight, int64_t core_columns,
                     const float* out_bias);

  absl::Status Forward(cudaStream_t stream, const CudaPass& pass,
                       const cuda::AddNormArgs& then) final;

 protected:
  // Mixes the pass: `in` holds pass.rows rows of in_columns fp32 (the projections without their
  // biases, which the core adds); writes pass.rows rows of core_columns in the weights' type to
  // `out`.
  virtual absl::Status Core(cudaStream_t stream, const CudaPass& pass, const float* in,
                            void* out) = 0;
  // For cores with a short convolution (kernels/cuda/short_conv.h): `shape` over the pass's rows
  // `a` into `out` (`out_dtype`), each slot's history at `layer_offset` of its state (in the
  // pool's element type) read and moved on. One launch for a decode pass; a prefill pass's
  // launches cover all its pieces.
  static absl::Status ShortConv(cudaStream_t stream, const CudaPass& pass,
                                const cuda::ShortConvShape& shape, const float* a,
                                int64_t layer_offset, cuda::DType out_dtype, void* out);

  const cuda::DType dtype_;
  const int64_t state_offset_;

 private:
  cuda::Gemm& gemm_;
  const int64_t d_model_;
  const void* const in_weight_;
  const int64_t in_columns_;
  const void* const out_weight_;
  const int64_t core_columns_;
  const float* const out_bias_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_PROJECTED_MIXER_H_
