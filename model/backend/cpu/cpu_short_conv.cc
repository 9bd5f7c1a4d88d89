// The short_conv mixer (model/layers/short_conv.h) on the CPU: in_proj over all rows of a pass
// as one GEMM, the convolution token by token per session (prefill and decode run the same
// step, so a chunk leaves bitwise the state its tokens fed one at a time leave), and out_proj
// added to the residual.

#include "model/backend/cpu/cpu_layer.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/layers/short_conv.h"

namespace linserve {
namespace {

// Workspace buffers (CpuWorkspace indices): in_proj's output (u, then g) and the gated rows.
enum Buffer { kIn, kGated };

// conv.weight [d_inner, kernel_size] → taps [kernel_size, d_inner], as the step kernel reads it.
std::vector<float> TapMajor(const Tensor& w) {
  const int64_t channels = w.shape[0];
  const int64_t kernel = w.shape[1];
  std::vector<float> taps(static_cast<size_t>(channels * kernel));
  for (int64_t ch = 0; ch < channels; ++ch) {
    for (int64_t j = 0; j < kernel; ++j) taps[j * channels + ch] = w.data[ch * kernel + j];
  }
  return taps;
}

class CpuShortConv final : public CpuMixer {
 public:
  CpuShortConv(const CpuLayerContext& context, const ShortConvParams& p, const LayerWeights& w,
               int64_t state_offset)
      : w_(w),
        workspace_(context.workspace),
        threads_(context.threads),
        d_model_(context.model.config.d_model),
        params_(p),
        state_offset_(state_offset),
        in_(PackWeights(context, w.At("conv.in_proj.weight"))),
        out_(PackWeights(context, w.At("conv.out_proj.weight"))),
        taps_(TapMajor(w.At("conv.weight"))) {
    workspace_.Reserve(kIn, int64_t{context.max_rows} * 2 * p.d_inner);
    workspace_.Reserve(kGated, int64_t{context.max_rows} * p.d_inner);
  }

  void Forward(const float* in, const CpuPass& pass, float* residual) override {
    const int rows = pass.rows;
    const int64_t di = params_.d_inner;
    float* a = workspace_.buffer(kIn);
    float* gated = workspace_.buffer(kGated);
    cpu::Linear(in, rows, d_model_, in_, OptionalData(w_, "conv.in_proj.bias"),
                cpu::Activation::kNone, cpu::LinearOutput::kStore, a, 2 * di, threads_);
    if (pass.prefill) {
      // The pieces in parallel, each piece's tokens in order: each step reads the history the
      // one before left.
      const int64_t pieces = static_cast<int64_t>(pass.pieces.size());
      const int threads = static_cast<int>(std::min<int64_t>(
          cpu::ThreadsForWork(threads_, int64_t{rows} * di * params_.kernel_size), pieces));
      cpu::ParallelFor(threads, pieces, [&](int64_t p, int) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(p)];
        float* state = State(pass, piece.slot);
        for (int r = piece.first_row; r < piece.first_row + piece.rows; ++r) Step(a, r, state, gated);
      });
    } else {
      for (int r = 0; r < rows; ++r) Step(a, r, State(pass, pass.decode_slots[r]), gated);
    }
    cpu::Linear(gated, rows, di, out_, OptionalData(w_, "conv.out_proj.bias"),
                cpu::Activation::kNone, cpu::LinearOutput::kAccumulate, residual, d_model_,
                threads_);
  }

 private:
  float* State(const CpuPass& pass, int32_t slot) const {
    return pass.states + slot * pass.state_floats + state_offset_;
  }

  void Step(const float* a, int row, float* state, float* gated) const {
    const int64_t di = params_.d_inner;
    const float* u = a + row * 2 * di;
    cpu::ShortConvStep(u, u + di, di, params_.kernel_size, taps_.data(),
                       OptionalData(w_, "conv.bias"), state, gated + row * di);
  }

  const LayerWeights& w_;
  CpuWorkspace& workspace_;
  const int threads_;
  const int64_t d_model_;
  const ShortConvParams params_;
  const int64_t state_offset_;
  const cpu::PackedMatrix in_, out_;
  const std::vector<float> taps_;
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuShortConv(const CpuLayerContext& context,
                                             const ComponentSpec& spec,
                                             const LayerWeights& weights, int64_t state_offset) {
  return std::make_unique<CpuShortConv>(context, ShortConvParams::From(spec.params), weights,
                                        state_offset);
}

}  // namespace linserve
