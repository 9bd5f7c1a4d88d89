// The short_conv mixer (model/layers/short_conv.h) on the CPU: in_proj projected
// (CpuProjectedMixer), the convolution token by token per session (prefill and decode run the
// same step, so a chunk leaves bitwise the state its tokens fed one at a time leave), and
// out_proj added to the residual.

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
#include "model/backend/cpu/cpu_projected_mixer.h"
#include "model/layers/short_conv.h"

namespace linserve {
namespace {

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

class CpuShortConv final : public CpuProjectedMixer {
 public:
  CpuShortConv(const CpuLayerContext& context, const ShortConvParams& p, const LayerWeights& w,
               int64_t state_offset)
      : CpuProjectedMixer(context, w, state_offset, {"conv.in_proj"}, "conv.out_proj"),
        params_(p),
        taps_(TapMajor(w.At("conv.weight"))),
        conv_bias_(OptionalData(w, "conv.bias")) {}

 private:
  // inputs[0]: in_proj's rows, u then g; `out`: the gated rows.
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int rows = pass.rows;
    const int64_t di = params_.d_inner;
    const float* a = inputs[0];
    if (pass.prefill) {
      // The pieces in parallel, each piece's tokens in order: each step reads the history the
      // one before left.
      const int64_t pieces = static_cast<int64_t>(pass.pieces.size());
      const int threads = static_cast<int>(std::min<int64_t>(
          cpu::ThreadsForWork(threads_, int64_t{rows} * di * params_.kernel_size), pieces));
      cpu::ParallelFor(threads, pieces, [&](int64_t p, int) {
        const PrefillPiece& piece = pass.pieces[static_cast<size_t>(p)];
        float* state = State(pass, piece.slot);
        for (int r = piece.first_row; r < piece.first_row + piece.rows; ++r) {
          Step(a, r, state, out);
        }
      });
    } else {
      for (int r = 0; r < rows; ++r) Step(a, r, State(pass, pass.decode_slots[r]), out);
    }
  }

  void Step(const float* a, int row, float* state, float* gated) const {
    const int64_t di = params_.d_inner;
    const float* u = a + row * 2 * di;
    cpu::ShortConvStep(u, u + di, di, params_.kernel_size, taps_.data(), conv_bias_, state,
                       gated + row * di);
  }

  const ShortConvParams params_;
  const std::vector<float> taps_;
  const float* const conv_bias_;  // null: none
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuShortConv(const CpuLayerContext& context,
                                             const ComponentSpec& spec,
                                             const LayerWeights& weights, int64_t state_offset) {
  return std::make_unique<CpuShortConv>(context, ShortConvParams::From(spec.params), weights,
                                        state_offset);
}

}  // namespace linserve
