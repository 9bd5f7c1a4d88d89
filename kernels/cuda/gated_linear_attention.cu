// Gated linear attention's step (kernels/cuda/gated_linear_attention.h). A block of kThreads
// threads owns one head of one session: q (scaled), k and the gates exp(gk) of its key channels
// (and with the rotation cos and sin of −θ_c) go to shared memory, then each thread takes columns
// j of S (j = thread, thread + kThreads, …) and in one pass over the k_dim rows (by pairs (c,
// c + k_dim/2) with the rotation) writes α_i (R S)_ij + k_i v_j and accumulates Sᵀq. Column j's
// values are contiguous across the warp, so each row of S is read in 128-byte pieces. A prefill
// block keeps its head's S in shared memory for the piece where it fits (resident_state.cuh).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gated_linear_attention.h"
#include "kernels/cuda/prefill_pieces.cuh"
#include "kernels/cuda/resident_state.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;  // heads are the grid's y

// log(sigmoid(x)) = min(x, 0) − log(1 + e^−|x|), as the CPU.
__device__ __forceinline__ float LogSigmoid(float x) {
  return __fsub_rn(fminf(x, 0.0f), Log1pOf(expf(-fabsf(x))));
}

struct SharedLayout {
  float* q;
  float* k;
  float* alpha;
  float* cos;  // [k_dim / 2] with the rotation: cos(−θ_c), sin(−θ_c)
  float* sin;
  float* o;
  float* reduce;
  float* state;  // a prefill block's resident state (resident_state.cuh), when it has room
};

// cos and sin of −θ_c = −base^(−2c/k_dim) for the k_dim/2 pairs, in double rounded to float (as
// the CPU's table), into shared memory; once per block.
__device__ __forceinline__ void FillTurn(const GatedLinearAttentionShape& shape,
                                         const SharedLayout& sh) {
  if (!shape.rotary) return;
  const int half = shape.k_dim / 2;
  for (int c = threadIdx.x; c < half; c += blockDim.x) {
    const double angle = -pow(shape.rope_base, -2.0 * c / shape.k_dim);
    sh.cos[c] = static_cast<float>(cos(angle));
    sh.sin[c] = static_cast<float>(sin(angle));
  }
  __syncthreads();
}

// One token (`row` of the pass) of head `h` on S (null: a padding row, zero state, no write).
// Shared memory: q, k and α (k_dim each), the turn's cos and sin, o (v_dim).
template <typename T>
__device__ __forceinline__ void Token(const GatedLinearAttentionRows& args, int64_t row, int h,
                                      float* s, const SharedLayout& sh) {
  float* q = sh.q;
  float* k = sh.k;
  float* alpha = sh.alpha;
  float* o = sh.o;
  float* reduce = sh.reduce;
  const GatedLinearAttentionShape& shape = args.shape;
  const int kd = shape.k_dim;
  const int vd = shape.v_dim;
  const int64_t key_dim = static_cast<int64_t>(shape.heads) * kd;
  const int64_t value_dim = static_cast<int64_t>(shape.heads) * vd;
  const float* qkv = args.qkv + row * args.qkv_stride;
  const float* proj = args.proj + row * args.proj_stride;
  const float* low = proj + args.low_col;
  const float scale = __fdiv_rn(1.0f, sqrtf(static_cast<float>(kd)));
  for (int i = threadIdx.x; i < kd; i += blockDim.x) {
    const int64_t c = static_cast<int64_t>(h) * kd + i;
    q[i] = __fmul_rn(qkv[c], scale);
    k[i] = qkv[key_dim + c];
    float g;
    if (shape.gate_up != nullptr) {
      const float* w = shape.gate_up + c * shape.rank;
      float logit = shape.gate_bias[c];
      for (int j = 0; j < shape.rank; ++j) logit = __fadd_rn(logit, __fmul_rn(w[j], low[j]));
      g = __fdiv_rn(LogSigmoid(logit), shape.gate_logit_normalizer);
      if (!(g >= shape.clamp_min)) g = shape.clamp_min;  // NaN too, as the CPU
    } else {
      g = static_cast<float>(log1p(-exp2(-5.0 - h)));  // RetNet's γ_h, as the CPU's table
    }
    alpha[i] = expf(g);
  }
  __syncthreads();
  const float* v = qkv + 2 * key_dim + static_cast<int64_t>(h) * vd;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < vd; j += blockDim.x) {
    const float vj = v[j];
    float out = 0.0f;
    if (shape.rotary) {
      // Pairs (c, c + half) turned by −θ_c, decayed and updated, in the CPU step's order.
      const int half = kd / 2;
      for (int c = 0; c < half; ++c) {
        float* a = s != nullptr ? s + static_cast<int64_t>(c) * vd + j : nullptr;
        float* b = s != nullptr ? s + static_cast<int64_t>(c + half) * vd + j : nullptr;
        const float x1 = a != nullptr ? *a : 0.0f;
        const float x2 = b != nullptr ? *b : 0.0f;
        const float t1 = __fsub_rn(__fmul_rn(x1, sh.cos[c]), __fmul_rn(x2, sh.sin[c]));
        const float t2 = __fadd_rn(__fmul_rn(x2, sh.cos[c]), __fmul_rn(x1, sh.sin[c]));
        const float n1 = __fadd_rn(__fmul_rn(t1, alpha[c]), __fmul_rn(k[c], vj));
        const float n2 = __fadd_rn(__fmul_rn(t2, alpha[c + half]), __fmul_rn(k[c + half], vj));
        if (a != nullptr) {
          *a = n1;
          *b = n2;
        }
        out = __fadd_rn(out, __fadd_rn(__fmul_rn(n1, q[c]), __fmul_rn(n2, q[c + half])));
      }
      o[j] = out;
      sum_sq = __fadd_rn(sum_sq, __fmul_rn(out, out));
      continue;
    }
    for (int i = 0; i < kd; ++i) {
      float* cell = s != nullptr ? s + static_cast<int64_t>(i) * vd + j : nullptr;
      const float sij = cell != nullptr ? __fmul_rn(*cell, alpha[i]) : 0.0f;
      const float next = __fadd_rn(sij, __fmul_rn(k[i], vj));
      if (cell != nullptr) *cell = next;
      out = __fadd_rn(out, __fmul_rn(next, q[i]));
    }
    o[j] = out;
    sum_sq = __fadd_rn(sum_sq, __fmul_rn(out, out));
  }
  sum_sq = BlockSum(sum_sq, reduce);
  const float inv =
      __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sum_sq, static_cast<float>(vd)), shape.norm_eps)));
  T* out_row = static_cast<T*>(args.out) + row * value_dim + static_cast<int64_t>(h) * vd;
  for (int j = threadIdx.x; j < vd; j += blockDim.x) {
    float y = __fmul_rn(__fmul_rn(o[j], inv), shape.g_norm[j]);
    if (args.g_col >= 0) {
      const float gate = proj[args.g_col + static_cast<int64_t>(h) * vd + j];
      y = __fmul_rn(y, __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))));
    }
    out_row[j] = FromFloat<T>(y);
  }
  __syncthreads();  // q, k, α and o are free for the next token
}

__device__ __forceinline__ float* HeadState(const GatedLinearAttentionRows& args, int32_t slot,
                                            int h) {
  if (slot < 0) return nullptr;
  return args.state + static_cast<int64_t>(slot) * args.slot_stride + args.layer_offset +
         static_cast<int64_t>(h) * args.shape.k_dim * args.shape.v_dim;
}

__device__ __forceinline__ SharedLayout Shared(const GatedLinearAttentionShape& shape) {
  extern __shared__ float smem[];
  const int kd = shape.k_dim;
  const int half = kd / 2;
  float* o = smem + 3 * kd + 2 * half;
  float* reduce = o + shape.v_dim;
  return {smem, smem + kd, smem + 2 * kd, smem + 3 * kd, smem + 3 * kd + half,
          o,    reduce,    reduce + 32};
}

// Grid (rows, heads).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    DecodeGatedLinearAttentionKernel(GatedLinearAttentionRows args, const int32_t* slots) {
  AfterPriorKernel();
  const SharedLayout sh = Shared(args.shape);
  const int64_t row = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y);
  FillTurn(args.shape, sh);
  Token<T>(args, row, h, HeadState(args, slots[row], h), sh);
}

// Grid (pieces, heads): a piece's tokens in order, on the head's state in shared memory when
// `resident` (PrefillSharedBytes).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PrefillGatedLinearAttentionKernel(GatedLinearAttentionRows args, PrefillTables tables,
                                      bool resident) {
  AfterPriorKernel();
  const SharedLayout sh = Shared(args.shape);
  const PrefillPiece piece = tables.pieces[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int64_t elements = static_cast<int64_t>(args.shape.k_dim) * args.shape.v_dim;
  float* state = HeadState(args, piece.slot, h);
  FillTurn(args.shape, sh);
  float* s = LoadResidentState(state, resident ? sh.state : nullptr, elements);
  const int end = piece.first_row + piece.rows;
  for (int row = piece.first_row; row < end; ++row) Token<T>(args, row, h, s, sh);
  StoreResidentState(state, s, elements);
}

size_t SharedBytes(const GatedLinearAttentionShape& shape) {
  return (3 * static_cast<size_t>(shape.k_dim) + 2 * (shape.k_dim / 2) + shape.v_dim + 32) *
         sizeof(float);
}

}  // namespace

absl::Status CheckGatedLinearAttentionShape(const GatedLinearAttentionShape& shape) {
  const bool bad_rank = shape.gate_up != nullptr && (shape.rank < 1 || shape.rank > kMaxGlaDim);
  if (shape.k_dim < 1 || shape.k_dim > kMaxGlaDim || shape.v_dim < 1 || shape.v_dim > kMaxGlaDim ||
      bad_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gated linear attention: head_k_dim ", shape.k_dim, ", head_v_dim ", shape.v_dim,
        " and gate_low_rank_dim ", shape.rank, " must be in [1, ", kMaxGlaDim, "]"));
  }
  if (shape.heads < 1 || shape.heads > kMaxGridY) {
    return absl::InvalidArgumentError(absl::StrCat("gated linear attention: n_heads ", shape.heads,
                                                   " must be in [1, ", kMaxGridY, "]"));
  }
  if (shape.rotary && shape.k_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gated linear attention: head_k_dim ",
                                                   shape.k_dim, " must be even for RoPE's turn"));
  }
  if (shape.gate_up != nullptr && !(shape.gate_logit_normalizer > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("gated linear attention: gate_logit_normalizer ",
                                                   shape.gate_logit_normalizer,
                                                   " must be positive"));
  }
  if (shape.g_norm == nullptr || (shape.gate_up == nullptr) != (shape.gate_bias == nullptr)) {
    return absl::InvalidArgumentError(
        "gated linear attention: the step needs g_norm.weight, and gk_proj.1's weight and bias "
        "together or neither");
  }
  return absl::OkStatus();
}

absl::Status LaunchDecodeGatedLinearAttention(cudaStream_t stream,
                                              const GatedLinearAttentionRows& args,
                                              const int32_t* slots, int rows) {
  LINSERVE_RETURN_IF_ERROR(CheckGatedLinearAttentionShape(args.shape));
  if (rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LaunchDependent(DecodeGatedLinearAttentionKernel<T>,
                    dim3(static_cast<unsigned>(rows), static_cast<unsigned>(args.shape.heads)),
                    kThreads, SharedBytes(args.shape), stream, args, slots);
    return LaunchStatus("DecodeGatedLinearAttentionKernel", __FILE__, __LINE__);
  });
}

absl::Status LaunchPrefillGatedLinearAttention(cudaStream_t stream,
                                               const GatedLinearAttentionRows& args,
                                               const PrefillTables& tables) {
  LINSERVE_RETURN_IF_ERROR(CheckGatedLinearAttentionShape(args.shape));
  if (tables.rows <= 0 || tables.piece_count <= 0) return absl::OkStatus();
  bool resident = false;
  const size_t smem = PrefillSharedBytes(SharedBytes(args.shape),
                                         static_cast<int64_t>(args.shape.k_dim) * args.shape.v_dim,
                                         sizeof(float), &resident);
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(PrefillGatedLinearAttentionKernel<T>, smem));
    LaunchDependent(
        PrefillGatedLinearAttentionKernel<T>,
        dim3(static_cast<unsigned>(tables.piece_count), static_cast<unsigned>(args.shape.heads)),
        kThreads, smem, stream, args, tables, resident);
    return LaunchStatus("PrefillGatedLinearAttentionKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
