// Host-side launchers for the short_conv mixer's convolution (Based's BaseConv,
// model/layers/short_conv.h): from in_proj's output row a = u | g (2·channels fp32, without
// in_proj's bias: added here), one fused kernel forms
//   c[ch] = Σ_{j<kernel} w[ch][j] · u_{t−(kernel−1)+j}[ch] + conv_bias[ch]
//   y[ch] = silu(c[ch]) · g[ch]
// and writes y in T, out_proj's input. Ungated (ShortConvShape::gated false: the recurrent kinds'
// convolutions over columns of their projections' rows: q/k/v, or Mamba-2's x/B/C), y =
// silu(c[ch]). The sum
// runs over j in order and every operation rounds as the CPU kernel's (cpu::ShortConvStep), so fp32
// results differ only in expf's last ulp.
//
// State layout (the same as StateBlob and as the CPU backend): the last kernel − 1 values of u
// (bias included), oldest first: (kernel − 1) rows of `channels` elements of state_dtype (fp32,
// or bf16 with --state_precision=bf16: u is rounded to nearest even when stored, and a prefill's
// taps inside its piece read u unrounded), at
//   state + slot * slot_stride + layer_offset.
// u before a session's first token is zero (a fresh slot's state is zero).
#ifndef LINSERVE_KERNELS_CUDA_SHORT_CONV_H_
#define LINSERVE_KERNELS_CUDA_SHORT_CONV_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

struct ShortConvShape {
  int channels = 0;                  // d_inner
  int kernel = 0;                    // taps, the current token's included
  // optional: in_proj's bias, [2·channels] (u's, then g's), or [channels] (u's) ungated
  const float* in_bias = nullptr;
  const float* weight = nullptr;     // [channels, kernel]: conv.weight as the checkpoint has it
  const float* conv_bias = nullptr;  // optional [channels]
  // Ungated (the recurrent kinds' convolutions): y = silu(c), a's rows hold u and then columns
  // the convolution does not read. Default: gated.
  bool gated = true;
  // Floats from one row of a to the next: at least 2·channels gated, channels ungated.
  // Default (0): 2·channels.
  int64_t a_stride = 0;
};

// The kernel sizes the kernels accept (short_conv's kernel_size parameter has the same range).
constexpr int kMinShortConvKernel = 2;
constexpr int kMaxShortConvKernel = 64;

// INVALID_ARGUMENT unless channels >= 1, kMinShortConvKernel <= kernel <= kMaxShortConvKernel,
// the weight is given and a_stride is 0 or wide enough. The launchers also refuse a state_dtype
// other than kF32 or kBf16.
absl::Status CheckShortConvShape(const ShortConvShape& shape);

struct DecodeShortConvArgs {
  ShortConvShape shape;
  const float* a = nullptr;        // [rows, a_stride]: u | g
  const int32_t* slots = nullptr;  // [rows]; a negative slot is padding: zero state, no write
  void* state = nullptr;           // elements of state_dtype
  DType state_dtype = DType::kF32;  // kF32 or kBf16
  int64_t slot_stride = 0;          // elements per slot
  int64_t layer_offset = 0;         // elements from a slot's start to this layer's state
  int rows = 0;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, channels]
};
// One token per row, each of a distinct slot: the output from the slot's history and the row's
// u, then the history moves on one token. One thread per (row, channel) owns that channel of
// the slot's history, so every history value is read once and written once.
absl::Status LaunchDecodeShortConv(cudaStream_t stream, const DecodeShortConvArgs& args);

struct PrefillShortConvArgs {
  ShortConvShape shape;
  const float* a = nullptr;  // [tables.rows, a_stride]: the pass's rows
  PrefillTables tables;      // the pass's sessions (device tables; prefill_pieces.h)
  // The state pool: piece p's layer state at tables.pieces[p].slot · slot_stride + layer_offset.
  void* state = nullptr;            // elements of state_dtype
  DType state_dtype = DType::kF32;  // kF32 or kBf16
  int64_t slot_stride = 0;
  int64_t layer_offset = 0;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [tables.rows, channels]
};
// Every piece's rows' outputs in parallel (row t of a piece reads the piece's earlier rows and,
// for the taps before the piece, its state), then, in a second launch so that no output reads a
// state value already replaced, each piece's state becomes its last kernel − 1 values of u, the
// older state rows kept when the piece is shorter than that. Two launches whatever the pieces;
// equals feeding each piece's tokens one by one.
absl::Status LaunchPrefillShortConv(cudaStream_t stream, const PrefillShortConvArgs& args);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_SHORT_CONV_H_
