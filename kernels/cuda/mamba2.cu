// Mamba-2's scan and grouped gated RMSNorm (kernels/cuda/mamba2.h). A scan block of kThreads
// threads owns one head of one session: B and C of its group go to shared memory, then each
// thread takes columns j of S (j = thread, thread + kThreads, …) and in one pass over the
// state_size rows writes a S_nj + B_n (dt x_j) and accumulates Sᵀ C. A prefill scan block keeps
// its head's S in shared memory for the piece where it fits (resident_state.cuh). A norm block
// owns one group of one row.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mamba2.h"
#include "kernels/cuda/prefill_pieces.cuh"
#include "kernels/cuda/resident_state.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;  // heads or groups are the grid's y

__device__ __forceinline__ int64_t InnerDim(const Mamba2Shape& shape) {
  return static_cast<int64_t>(shape.heads) * shape.head_dim;
}
__device__ __forceinline__ int64_t GroupStateDim(const Mamba2Shape& shape) {
  return static_cast<int64_t>(shape.groups) * shape.state_size;
}

// x / (1 + e^−x), as the CPU.
__device__ __forceinline__ float Silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }

// One token (`row` of the pass) of head `h` on S (null: a padding row, zero state, no write).
// Shared memory: B and C (state_size each).
template <typename S>
__device__ __forceinline__ void Token(const Mamba2Rows& args, int64_t row, int h, S* s, float* b,
                                      float* c) {
  const Mamba2Shape& shape = args.shape;
  const int pd = shape.head_dim;
  const int ns = shape.state_size;
  const int64_t di = InnerDim(shape);
  const int64_t gn = GroupStateDim(shape);
  const int g = h / (shape.heads / shape.groups);
  const int64_t dt_col = di + di + 2 * gn + h;
  float raw = args.in[row * args.in_stride + dt_col];
  if (shape.in_bias != nullptr) raw = __fadd_rn(raw, shape.in_bias[dt_col]);
  float dt = Softplus(__fadd_rn(raw, shape.dt_bias[h]));
  dt = dt < shape.dt_min ? shape.dt_min : (shape.dt_max < dt ? shape.dt_max : dt);  // std::clamp
  float log_decay = __fmul_rn(-expf(shape.a_log[h]), dt);
  if (!(log_decay >= shape.min_log_decay)) log_decay = shape.min_log_decay;  // NaN too
  const float alpha = expf(log_decay);
  const float* xbc = args.xbc + row * (di + 2 * gn);
  for (int i = threadIdx.x; i < ns; i += blockDim.x) {
    b[i] = xbc[di + static_cast<int64_t>(g) * ns + i];
    c[i] = xbc[di + gn + static_cast<int64_t>(g) * ns + i];
  }
  __syncthreads();
  float* y = args.y + row * di + static_cast<int64_t>(h) * pd;
  for (int j = threadIdx.x; j < pd; j += blockDim.x) {
    const float x = xbc[static_cast<int64_t>(h) * pd + j];
    const float v = __fmul_rn(dt, x);
    float out = 0.0f;
    for (int n = 0; n < ns; ++n) {
      S* cell = s != nullptr ? s + static_cast<int64_t>(n) * pd + j : nullptr;
      const float snj = cell != nullptr ? __fmul_rn(ToFloat(*cell), alpha) : 0.0f;
      const float next = __fadd_rn(snj, __fmul_rn(b[n], v));
      if (cell != nullptr) *cell = FromFloat<S>(next);
      out = __fadd_rn(out, __fmul_rn(next, c[n]));
    }
    const float d = shape.d[shape.d_has_hdim ? static_cast<int64_t>(h) * pd + j : h];
    y[j] = __fadd_rn(out, __fmul_rn(d, x));
  }
  __syncthreads();  // B and C are free for the next token
}

template <typename S>
__device__ __forceinline__ S* HeadState(const Mamba2Rows& args, int32_t slot, int h) {
  if (slot < 0) return nullptr;
  return static_cast<S*>(args.state) + static_cast<int64_t>(slot) * args.slot_stride +
         args.layer_offset + static_cast<int64_t>(h) * args.shape.state_size * args.shape.head_dim;
}

// Grid (rows, heads).
template <typename S>
__global__ void __launch_bounds__(kThreads)
    DecodeMamba2Kernel(Mamba2Rows args, const int32_t* slots) {
  AfterPriorKernel();
  extern __shared__ float smem[];
  const int64_t row = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);
  Token(args, row, h, HeadState<S>(args, slots[row], h), smem, smem + args.shape.state_size);
}

// Grid (pieces, heads): a piece's tokens in order, on the head's state in shared memory (after B
// and C) when `resident` (PrefillSharedBytes).
template <typename S>
__global__ void __launch_bounds__(kThreads)
    PrefillMamba2Kernel(Mamba2Rows args, PrefillTables tables, bool resident) {
  AfterPriorKernel();
  extern __shared__ float smem[];
  const PrefillPiece piece = tables.pieces[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int64_t elements = static_cast<int64_t>(args.shape.state_size) * args.shape.head_dim;
  S* state = HeadState<S>(args, piece.slot, h);
  S* room = resident ? reinterpret_cast<S*>(smem + 2 * args.shape.state_size) : nullptr;
  S* s = LoadResidentState(state, room, elements);
  const int end = piece.first_row + piece.rows;
  for (int row = piece.first_row; row < end; ++row) {
    Token(args, row, h, s, smem, smem + args.shape.state_size);
  }
  StoreResidentState(state, s, elements);
}

// Grid (rows, groups): the gate and the grouped RMSNorm (model/layers/mamba2.h) of one group of
// one row, written in T.
template <typename T>
__global__ void __launch_bounds__(kThreads) Mamba2NormKernel(Mamba2Rows args) {
  AfterPriorKernel();
  __shared__ float reduce[32];
  const Mamba2Shape& shape = args.shape;
  const int64_t row = blockIdx.x;
  const int64_t di = InnerDim(shape);
  const int64_t size = di / shape.groups;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * size;
  const float* y = args.y + row * di + first;
  const float* z = args.in + row * args.in_stride + first;
  const float* z_bias = shape.in_bias != nullptr ? shape.in_bias + first : nullptr;
  T* out = static_cast<T*>(args.out) + row * di + first;
  const auto gate = [&](int64_t i) {
    return Silu(z_bias != nullptr ? __fadd_rn(z[i], z_bias[i]) : z[i]);
  };
  if (!shape.rmsnorm) {
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      out[i] = FromFloat<T>(__fmul_rn(y[i], gate(i)));
    }
    return;
  }
  const auto gated = [&](int64_t i) {
    return shape.norm_before_gate ? y[i] : __fmul_rn(y[i], gate(i));
  };
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    const float u = gated(i);
    sum = __fadd_rn(sum, __fmul_rn(u, u));
  }
  sum = BlockSum(sum, reduce);
  const float inv =
      __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sum, static_cast<float>(size)), shape.norm_eps)));
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    float v = __fmul_rn(__fmul_rn(gated(i), inv), shape.norm[first + i]);
    if (shape.norm_before_gate) v = __fmul_rn(v, gate(i));
    out[i] = FromFloat<T>(v);
  }
}

size_t SharedBytes(const Mamba2Shape& shape) {
  return 2 * static_cast<size_t>(shape.state_size) * sizeof(float);
}

absl::Status CheckStateDType(DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kBf16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("mamba2: state_dtype ", DTypeName(dtype), " is not fp32 or bf16"));
}

absl::Status LaunchNorm(cudaStream_t stream, const Mamba2Rows& args, int rows) {
  if (rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LaunchDependent(Mamba2NormKernel<T>,
                    dim3(static_cast<unsigned>(rows), static_cast<unsigned>(args.shape.groups)),
                    kThreads, 0, stream, args);
    return LaunchStatus("Mamba2NormKernel", __FILE__, __LINE__);
  });
}

}  // namespace

absl::Status CheckMamba2Shape(const Mamba2Shape& shape) {
  if (shape.head_dim < 1 || shape.head_dim > kMaxMamba2Dim || shape.state_size < 1 ||
      shape.state_size > kMaxMamba2Dim || shape.heads < 1 || shape.heads > kMaxMamba2Dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("mamba2: n_heads ", shape.heads, ", head_dim ", shape.head_dim,
                     " and state_size ", shape.state_size, " must be in [1, ", kMaxMamba2Dim, "]"));
  }
  if (shape.groups < 1 || shape.heads % shape.groups != 0 || shape.groups > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("mamba2: n_groups ", shape.groups, " must divide n_heads ", shape.heads));
  }
  if (shape.dt_bias == nullptr || shape.a_log == nullptr || shape.d == nullptr ||
      (shape.rmsnorm && shape.norm == nullptr)) {
    return absl::InvalidArgumentError(
        "mamba2: the scan needs dt_bias, A_log and D, and the norm its weight");
  }
  if (!(shape.dt_min <= shape.dt_max)) {
    return absl::InvalidArgumentError(absl::StrCat("mamba2: dt_limit_min ", shape.dt_min,
                                                   " is above dt_limit_max ", shape.dt_max));
  }
  return absl::OkStatus();
}

absl::Status LaunchDecodeMamba2(cudaStream_t stream, const Mamba2Rows& args, const int32_t* slots,
                                int rows) {
  LINSERVE_RETURN_IF_ERROR(CheckMamba2Shape(args.shape));
  LINSERVE_RETURN_IF_ERROR(CheckStateDType(args.state_dtype));
  if (rows <= 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(args.shape.heads));
  if (args.state_dtype == DType::kBf16) {
    LaunchDependent(DecodeMamba2Kernel<__nv_bfloat16>, grid, kThreads, SharedBytes(args.shape),
                    stream, args, slots);
  } else {
    LaunchDependent(DecodeMamba2Kernel<float>, grid, kThreads, SharedBytes(args.shape), stream,
                    args, slots);
  }
  LINSERVE_RETURN_IF_ERROR(LaunchStatus("DecodeMamba2Kernel", __FILE__, __LINE__));
  return LaunchNorm(stream, args, rows);
}

absl::Status LaunchPrefillMamba2(cudaStream_t stream, const Mamba2Rows& args,
                                 const PrefillTables& tables) {
  LINSERVE_RETURN_IF_ERROR(CheckMamba2Shape(args.shape));
  LINSERVE_RETURN_IF_ERROR(CheckStateDType(args.state_dtype));
  if (tables.rows <= 0 || tables.piece_count <= 0) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(tables.piece_count),
                  static_cast<unsigned>(args.shape.heads));
  const int64_t elements = static_cast<int64_t>(args.shape.state_size) * args.shape.head_dim;
  bool resident = false;
  const size_t smem =
      PrefillSharedBytes(SharedBytes(args.shape), elements, DTypeSize(args.state_dtype), &resident);
  if (args.state_dtype == DType::kBf16) {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(PrefillMamba2Kernel<__nv_bfloat16>, smem));
    LaunchDependent(PrefillMamba2Kernel<__nv_bfloat16>, grid, kThreads, smem, stream, args, tables,
                    resident);
  } else {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(PrefillMamba2Kernel<float>, smem));
    LaunchDependent(PrefillMamba2Kernel<float>, grid, kThreads, smem, stream, args, tables,
                    resident);
  }
  LINSERVE_RETURN_IF_ERROR(LaunchStatus("PrefillMamba2Kernel", __FILE__, __LINE__));
  return LaunchNorm(stream, args, tables.rows);
}

}  // namespace linserve::cuda
