// The delta rule's step (kernels/cuda/delta_rule.h). A block of kThreads threads owns one
// value head of one session: q and k of its q/k head are normalised in shared memory, then each
// thread takes columns j of S (j = thread, thread + kThreads, …): a first pass over the k_dim
// rows forms (decay·S)ᵀk for its columns, a second writes S + k uᵀ and accumulates Sᵀq. Column
// j's values are contiguous across the warp, so each row of S is read in 128-byte pieces. A
// prefill block keeps its head's S in shared memory for the piece where it fits
// (resident_state.cuh).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/prefill_pieces.cuh"
#include "kernels/cuda/resident_state.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;  // value heads are the grid's y

// x[0 … n) ← x / sqrt(Σ x² + eps) · scale, in shared memory.
__device__ __forceinline__ void L2Normalize(float* x, int n, float eps, float scale,
                                            float* reduce) {
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum = __fadd_rn(sum, __fmul_rn(x[i], x[i]));
  sum = BlockSum(sum, reduce);
  const float factor = __fdiv_rn(scale, sqrtf(__fadd_rn(sum, eps)));
  __syncthreads();  // every thread has read x for the sum
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = __fmul_rn(x[i], factor);
  __syncthreads();
}

// One token (`row` of the pass) of value head `vh` on S (null: a padding row, zero state, no
// write). Shared memory: q and k (k_dim each), o (v_dim).
template <typename T>
__device__ __forceinline__ void Token(const GatedDeltaRuleRows& args, int64_t row, int vh, float* s,
                                      float* q, float* k, float* o, float* reduce) {
  const GatedDeltaRuleShape& shape = args.shape;
  const int kd = shape.k_dim;
  const int vd = shape.v_dim;
  const int64_t key_dim = static_cast<int64_t>(shape.heads) * kd;
  const int64_t value_dim = static_cast<int64_t>(shape.v_heads) * vd;
  const int h = vh / (shape.v_heads / shape.heads);
  const float* qkv = args.qkv + row * (2 * key_dim + value_dim);
  for (int i = threadIdx.x; i < kd; i += blockDim.x) {
    q[i] = qkv[static_cast<int64_t>(h) * kd + i];
    k[i] = qkv[key_dim + static_cast<int64_t>(h) * kd + i];
  }
  __syncthreads();
  L2Normalize(q, kd, shape.l2_eps, __fdiv_rn(1.0f, sqrtf(static_cast<float>(kd))), reduce);
  L2Normalize(k, kd, shape.l2_eps, 1.0f, reduce);
  const float* proj = args.proj + row * args.proj_stride;
  // Without a decay S is not scaled (the CPU's exp(0) = 1 exactly); without b, β = 1.
  float decay = 1.0f;
  if (shape.a_log != nullptr) {
    float g = __fmul_rn(-expf(shape.a_log[vh]),
                        Softplus(__fadd_rn(proj[args.a_col + vh], shape.dt_bias[vh])));
    if (!(g >= shape.min_log_decay)) g = shape.min_log_decay;  // NaN too, as the CPU
    decay = expf(g);
  }
  float beta =
      args.b_col >= 0 ? __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-proj[args.b_col + vh]))) : 1.0f;
  if (shape.allow_neg_eigval) beta = __fmul_rn(beta, 2.0f);
  const float* v = qkv + 2 * key_dim + static_cast<int64_t>(vh) * vd;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < vd; j += blockDim.x) {
    float kv = 0.0f;
    for (int i = 0; i < kd; ++i) {
      const float sij = s != nullptr ? __fmul_rn(s[static_cast<int64_t>(i) * vd + j], decay) : 0.0f;
      kv = __fadd_rn(kv, __fmul_rn(sij, k[i]));
    }
    const float u = __fmul_rn(beta, __fsub_rn(v[j], kv));
    float out = 0.0f;
    for (int i = 0; i < kd; ++i) {
      float* cell = s != nullptr ? s + static_cast<int64_t>(i) * vd + j : nullptr;
      const float sij = cell != nullptr ? __fmul_rn(*cell, decay) : 0.0f;
      const float next = __fadd_rn(sij, __fmul_rn(k[i], u));
      if (cell != nullptr) *cell = next;
      out = __fadd_rn(out, __fmul_rn(next, q[i]));
    }
    o[j] = out;
    sum_sq = __fadd_rn(sum_sq, __fmul_rn(out, out));
  }
  sum_sq = BlockSum(sum_sq, reduce);
  const float inv =
      __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(vd)), shape.norm_eps)));
  T* out_row = static_cast<T*>(args.out) + row * value_dim + static_cast<int64_t>(vh) * vd;
  for (int j = threadIdx.x; j < vd; j += blockDim.x) {
    float y = __fmul_rn(__fmul_rn(o[j], inv), shape.o_norm[j]);
    if (args.g_col >= 0) {
      const float gate = proj[args.g_col + static_cast<int64_t>(vh) * vd + j];
      y = __fmul_rn(y, __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))));
    }
    out_row[j] = FromFloat<T>(y);
  }
  __syncthreads();  // q, k and o are free for the next token
}

__device__ __forceinline__ float* HeadState(const GatedDeltaRuleRows& args, int32_t slot, int vh) {
  if (slot < 0) return nullptr;
  return args.state + static_cast<int64_t>(slot) * args.slot_stride + args.layer_offset +
         static_cast<int64_t>(vh) * args.shape.k_dim * args.shape.v_dim;
}

struct SharedLayout {
  float* q;
  float* k;
  float* o;
  float* reduce;
  float* state;  // a prefill block's resident state (resident_state.cuh), when it has room
};

__device__ __forceinline__ SharedLayout Shared(const GatedDeltaRuleShape& shape) {
  extern __shared__ float smem[];
  float* reduce = smem + 2 * shape.k_dim + shape.v_dim;
  return {smem, smem + shape.k_dim, smem + 2 * shape.k_dim, reduce, reduce + 32};
}

// Grid (rows, v_heads).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    DecodeGatedDeltaRuleKernel(GatedDeltaRuleRows args, const int32_t* slots) {
  AfterPriorKernel();
  const SharedLayout sh = Shared(args.shape);
  const int64_t row = blockIdx.x;
  const int vh = static_cast<int>(blockIdx.y);
  Token<T>(args, row, vh, HeadState(args, slots[row], vh), sh.q, sh.k, sh.o, sh.reduce);
}

// Grid (pieces, v_heads): a piece's tokens in order, on the head's state in shared memory when
// `resident` (PrefillSharedBytes).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PrefillGatedDeltaRuleKernel(GatedDeltaRuleRows args, PrefillTables tables, bool resident) {
  AfterPriorKernel();
  const SharedLayout sh = Shared(args.shape);
  const PrefillPiece piece = tables.pieces[blockIdx.x];
  const int vh = static_cast<int>(blockIdx.y);
  const int64_t elements = static_cast<int64_t>(args.shape.k_dim) * args.shape.v_dim;
  float* state = HeadState(args, piece.slot, vh);
  float* s = LoadResidentState(state, resident ? sh.state : nullptr, elements);
  const int end = piece.first_row + piece.rows;
  for (int row = piece.first_row; row < end; ++row) {
    Token<T>(args, row, vh, s, sh.q, sh.k, sh.o, sh.reduce);
  }
  StoreResidentState(state, s, elements);
}

size_t SharedBytes(const GatedDeltaRuleShape& shape) {
  return (2 * static_cast<size_t>(shape.k_dim) + shape.v_dim + 32) * sizeof(float);
}

}  // namespace

absl::Status CheckGatedDeltaRuleShape(const GatedDeltaRuleShape& shape) {
  if (shape.k_dim < 1 || shape.k_dim > kMaxDeltaRuleHeadDim || shape.v_dim < 1 ||
      shape.v_dim > kMaxDeltaRuleHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("delta rule: head_k_dim ", shape.k_dim,
                                                   " and head_v_dim ", shape.v_dim,
                                                   " must be in [1, ", kMaxDeltaRuleHeadDim, "]"));
  }
  if (shape.heads < 1 || shape.v_heads < 1 || shape.v_heads % shape.heads != 0 ||
      shape.v_heads > kMaxGridY) {
    return absl::InvalidArgumentError(absl::StrCat("delta rule: n_v_heads ", shape.v_heads,
                                                   " must be a multiple of n_heads ", shape.heads,
                                                   " and at most ", kMaxGridY));
  }
  if (shape.o_norm == nullptr || (shape.a_log == nullptr) != (shape.dt_bias == nullptr)) {
    return absl::InvalidArgumentError(
        "delta rule: the step needs o_norm.weight, and A_log and dt_bias together or neither");
  }
  return absl::OkStatus();
}

absl::Status LaunchDecodeGatedDeltaRule(cudaStream_t stream, const GatedDeltaRuleRows& args,
                                        const int32_t* slots, int rows) {
  LINSERVE_RETURN_IF_ERROR(CheckGatedDeltaRuleShape(args.shape));
  if (rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LaunchDependent(DecodeGatedDeltaRuleKernel<T>,
                    dim3(static_cast<unsigned>(rows), static_cast<unsigned>(args.shape.v_heads)),
                    kThreads, SharedBytes(args.shape), stream, args, slots);
    return LaunchStatus("DecodeGatedDeltaRuleKernel", __FILE__, __LINE__);
  });
}

absl::Status LaunchPrefillGatedDeltaRule(cudaStream_t stream, const GatedDeltaRuleRows& args,
                                         const PrefillTables& tables) {
  LINSERVE_RETURN_IF_ERROR(CheckGatedDeltaRuleShape(args.shape));
  if (tables.rows <= 0 || tables.piece_count <= 0) return absl::OkStatus();
  bool resident = false;
  const size_t smem = PrefillSharedBytes(SharedBytes(args.shape),
                                         static_cast<int64_t>(args.shape.k_dim) * args.shape.v_dim,
                                         sizeof(float), &resident);
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(PrefillGatedDeltaRuleKernel<T>, smem));
    LaunchDependent(
        PrefillGatedDeltaRuleKernel<T>,
        dim3(static_cast<unsigned>(tables.piece_count), static_cast<unsigned>(args.shape.v_heads)),
        kThreads, smem, stream, args, tables, resident);
    return LaunchStatus("PrefillGatedDeltaRuleKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
