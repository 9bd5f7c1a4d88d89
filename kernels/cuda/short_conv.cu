// The short_conv mixer's fused bias + depthwise causal convolution + silu + gate
// (kernels/cuda/short_conv.h). Every kernel is one thread per channel of a token: the channels
// are the innermost index of a, the state rows and the output, so a warp reads and writes 128
// contiguous bytes of each. The taps w[ch][0 … kernel−1] are a thread's own run of `kernel`
// floats (the warp's runs are contiguous, so they come through L1). The work is memory-bound
// and tiny next to in_proj and out_proj; it exists to read a and the state once and to write
// out_proj's input once, in T.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/prefill_pieces.cuh"
#include "kernels/cuda/short_conv.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;  // rows (decode) or tokens (prefill) are the grid's y

// Floats from one row of a to the next.
__device__ __forceinline__ int64_t Stride(const ShortConvShape& shape) {
  return shape.a_stride != 0 ? shape.a_stride : 2 * static_cast<int64_t>(shape.channels);
}

// u (or, at channels + ch, g) of one token row of a, with in_proj's bias.
__device__ __forceinline__ float LoadA(const float* a, const ShortConvShape& shape, int64_t row,
                                       int64_t col) {
  const float v = a[row * Stride(shape) + col];
  return shape.in_bias != nullptr ? __fadd_rn(v, shape.in_bias[col]) : v;
}

// y = silu(c + conv_bias) · g (ungated: silu(c + conv_bias)), in the CPU kernel's order of
// operations: silu(x) = x · 1/(1+e^−x). g is read only when gated.
__device__ __forceinline__ float GatedSilu(float c, const float* a, const ShortConvShape& shape,
                                           int64_t row, int ch) {
  if (shape.conv_bias != nullptr) c = __fadd_rn(c, shape.conv_bias[ch]);
  const float sigmoid = 1.0f / __fadd_rn(1.0f, expf(-c));
  const float y = __fmul_rn(c, sigmoid);
  if (!shape.gated) return y;
  return __fmul_rn(y, LoadA(a, shape, row, static_cast<int64_t>(shape.channels) + ch));
}

template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) DecodeShortConvKernel(DecodeShortConvArgs args) {
  AfterPriorKernel();
  const ShortConvShape& shape = args.shape;
  const int channels = shape.channels;
  const int kernel = shape.kernel;
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (ch >= channels) return;
  const int slot = args.slots[row];
  S* history = slot >= 0
                   ? static_cast<S*>(args.state) + static_cast<int64_t>(slot) * args.slot_stride +
                         args.layer_offset + ch
                   : nullptr;
  const float* w = shape.weight + static_cast<int64_t>(ch) * kernel;
  const float u = LoadA(args.a, shape, row, ch);
  // History row j holds u_{t−(kernel−1)+j}; after the step row j − 1 does, and u is row
  // kernel − 2. This thread alone reads and writes this channel of the slot's rows.
  float c = 0.0f;
  for (int j = 0; j + 1 < kernel; ++j) {
    const S h =
        history != nullptr ? history[static_cast<int64_t>(j) * channels] : FromFloat<S>(0.0f);
    c = __fadd_rn(c, __fmul_rn(w[j], ToFloat(h)));
    if (history != nullptr && j > 0) history[static_cast<int64_t>(j - 1) * channels] = h;
  }
  c = __fadd_rn(c, __fmul_rn(w[kernel - 1], u));
  if (history != nullptr) history[static_cast<int64_t>(kernel - 2) * channels] = FromFloat<S>(u);
  static_cast<T*>(args.out)[row * channels + ch] =
      FromFloat<T>(GatedSilu(c, args.a, shape, row, ch));
}

// The layer's state of a piece's slot.
template <typename S>
__device__ __forceinline__ S* PieceState(const PrefillShortConvArgs& args,
                                         const PrefillPiece& piece) {
  return static_cast<S*>(args.state) + static_cast<int64_t>(piece.slot) * args.slot_stride +
         args.layer_offset;
}

// Pass row `row` (grid y), channel ch: its piece's token t; taps before the piece come from the
// piece's state (row kernel − 1 + p for position p < 0), the rest from the piece's own rows of a.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) PrefillShortConvKernel(PrefillShortConvArgs args) {
  AfterPriorKernel();
  const ShortConvShape& shape = args.shape;
  const int channels = shape.channels;
  const int kernel = shape.kernel;
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (ch >= channels) return;
  const PrefillPiece piece = args.tables.pieces[PieceOfRow(args.tables, static_cast<int>(row))];
  const float* a = args.a + static_cast<int64_t>(piece.first_row) * Stride(shape);
  const S* state = PieceState<S>(args, piece);
  const int64_t t = row - piece.first_row;
  const float* w = shape.weight + static_cast<int64_t>(ch) * kernel;
  float c = 0.0f;
  for (int j = 0; j < kernel; ++j) {
    const int64_t p = t - (kernel - 1) + j;
    const float u =
        p >= 0 ? LoadA(a, shape, p, ch) : ToFloat(state[(kernel - 1 + p) * channels + ch]);
    c = __fadd_rn(c, __fmul_rn(w[j], u));
  }
  static_cast<T*>(args.out)[row * channels + ch] = FromFloat<T>(GatedSilu(c, a, shape, t, ch));
}

// After a piece (grid y) of n rows: state row r holds u at position n − (kernel − 1) + r, from a
// when that is inside the piece, else the old state row n + r. That row is above r, so
// ascending r reads it before this thread overwrites it.
template <typename S>
__global__ void __launch_bounds__(kThreads) ShortConvAdvanceStateKernel(PrefillShortConvArgs args) {
  AfterPriorKernel();
  const ShortConvShape& shape = args.shape;
  const int channels = shape.channels;
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= channels) return;
  const PrefillPiece piece = args.tables.pieces[blockIdx.y];
  const float* a = args.a + static_cast<int64_t>(piece.first_row) * Stride(shape);
  S* state = PieceState<S>(args, piece);
  for (int r = 0; r + 1 < shape.kernel; ++r) {
    const int64_t p = static_cast<int64_t>(piece.rows) - (shape.kernel - 1) + r;
    state[static_cast<int64_t>(r) * channels + ch] =
        p >= 0 ? FromFloat<S>(LoadA(a, shape, p, ch))
               : state[(piece.rows + static_cast<int64_t>(r)) * channels + ch];
  }
}

unsigned ChannelBlocks(int channels) {
  return static_cast<unsigned>((channels + kThreads - 1) / kThreads);
}

absl::Status CheckStateDType(DType dtype, absl::string_view what) {
  if (dtype == DType::kF32 || dtype == DType::kBf16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": state_dtype ", DTypeName(dtype), " is not fp32 or bf16"));
}

}  // namespace

absl::Status CheckShortConvShape(const ShortConvShape& shape) {
  if (shape.channels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("short_conv: d_inner ", shape.channels, " < 1"));
  }
  if (shape.kernel < kMinShortConvKernel || shape.kernel > kMaxShortConvKernel) {
    return absl::InvalidArgumentError(absl::StrCat("short_conv: kernel_size ", shape.kernel,
                                                   " outside [", kMinShortConvKernel, ", ",
                                                   kMaxShortConvKernel, "]"));
  }
  if (shape.weight == nullptr) {
    return absl::InvalidArgumentError("short_conv: the convolution needs its weight (conv.weight)");
  }
  const int64_t read = (shape.gated ? 2 : 1) * static_cast<int64_t>(shape.channels);
  if (shape.a_stride != 0 && shape.a_stride < read) {
    return absl::InvalidArgumentError(absl::StrCat("short_conv: rows of ", shape.a_stride,
                                                   " floats hold fewer than the ", read, " read"));
  }
  return absl::OkStatus();
}

absl::Status LaunchDecodeShortConv(cudaStream_t stream, const DecodeShortConvArgs& args) {
  if (absl::Status status = CheckShortConvShape(args.shape); !status.ok()) return status;
  LINSERVE_RETURN_IF_ERROR(CheckStateDType(args.state_dtype, "short_conv decode"));
  if (args.rows <= 0) return absl::OkStatus();
  if (args.rows > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("short_conv decode: ", args.rows, " rows > ", kMaxGridY));
  }
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    const dim3 grid(ChannelBlocks(args.shape.channels), args.rows);
    if (args.state_dtype == DType::kBf16) {
      LaunchDependent(DecodeShortConvKernel<T, __nv_bfloat16>, grid, kThreads, 0, stream, args);
    } else {
      LaunchDependent(DecodeShortConvKernel<T, float>, grid, kThreads, 0, stream, args);
    }
    return LaunchStatus("DecodeShortConvKernel", __FILE__, __LINE__);
  });
}

absl::Status LaunchPrefillShortConv(cudaStream_t stream, const PrefillShortConvArgs& args) {
  if (absl::Status status = CheckShortConvShape(args.shape); !status.ok()) return status;
  LINSERVE_RETURN_IF_ERROR(CheckStateDType(args.state_dtype, "short_conv prefill"));
  const PrefillTables& t = args.tables;
  if (t.rows <= 0 || t.piece_count <= 0) return absl::OkStatus();
  if (t.rows > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("short_conv prefill: ", t.rows, " rows > ", kMaxGridY));
  }
  const unsigned channel_blocks = ChannelBlocks(args.shape.channels);
  const bool bf16 = args.state_dtype == DType::kBf16;
  const absl::Status outputs = LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    const dim3 grid(channel_blocks, t.rows);
    if (bf16) {
      LaunchDependent(PrefillShortConvKernel<T, __nv_bfloat16>, grid, kThreads, 0, stream, args);
    } else {
      LaunchDependent(PrefillShortConvKernel<T, float>, grid, kThreads, 0, stream, args);
    }
    return LaunchStatus("PrefillShortConvKernel", __FILE__, __LINE__);
  });
  if (!outputs.ok()) return outputs;
  const dim3 pieces(channel_blocks, t.piece_count);
  if (bf16) {
    LaunchDependent(ShortConvAdvanceStateKernel<__nv_bfloat16>, pieces, kThreads, 0, stream, args);
  } else {
    LaunchDependent(ShortConvAdvanceStateKernel<float>, pieces, kThreads, 0, stream, args);
  }
  return LaunchStatus("ShortConvAdvanceStateKernel", __FILE__, __LINE__);
}

}  // namespace linserve::cuda
