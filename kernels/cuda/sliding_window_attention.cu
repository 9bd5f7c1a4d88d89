// Sliding-window attention: one block per (token, head). A block holds its query (bias added)
// and the output accumulator in shared memory and walks the query's keys oldest first in tiles
// of kTile: each warp scores keys (lanes split the dims; the rotation by the key's distance is
// read from a table of cos and sin filled once per layer: recomputing it in every decode step cost
// a launch of 3.5 µs per layer on an H200, bench/results/gpu.md), the tile's scores update the
// running max and sum (online softmax, fp32), and each thread adds the tile's weighted values to
// its columns of the accumulator, reading a value row contiguously across the block. A key is a
// ring entry of the slot's state (stored without bias) or a row of the q/k/v projection (bias added
// as it is read).
//
// Writes to the ring come after every read of the old ring: in decode each (row, head) block is
// the only reader of its head's part of the entry it overwrites, so it writes after a barrier;
// in prefill other blocks read the entries the piece overwrites, so a second launch writes them.
// The counters, read by every block, are advanced by a last launch.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/prefill_pieces.cuh"
#include "kernels/cuda/shared_memory.cuh"
#include "kernels/cuda/sliding_window_attention.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // keys per tile, <= kThreads
constexpr int kCopyThreads = 128;

// What every attention block needs of the shape.
struct Geometry {
  int heads = 0;
  int head_dim = 0;
  int half = 0;  // rotary_dim / 2
  int rotary_dim = 0;
  int ring = 0;  // R = window − 1
  double rope_base = 0;
  float scale = 0;                   // 1 / √head_dim, rounded to fp32 as the CPU does
  const float* cos_table = nullptr;  // [window, half]: cos(distance · inv_freq_i)
  const float* sin_table = nullptr;  // [window, half]
};

Geometry MakeGeometry(const SlidingWindowShape& s, const float* table) {  // table: may be null
  Geometry g;
  g.heads = s.heads;
  g.head_dim = s.head_dim;
  g.half = s.rotary_dim / 2;
  g.rotary_dim = s.rotary_dim;
  g.ring = s.window - 1;
  g.rope_base = s.rope_base;
  g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  g.cos_table = table;
  g.sin_table = table + static_cast<int64_t>(s.window) * g.half;
  return g;
}

// Floats of one ring entry (all heads' k and v) and where count lies in a slice.
__host__ __device__ inline int64_t EntryFloats(const Geometry& g) {
  return static_cast<int64_t>(g.heads) * 2 * g.head_dim;
}
__host__ __device__ inline int64_t CountOffset(const Geometry& g) {
  return static_cast<int64_t>(g.ring) * EntryFloats(g);
}

// The keys of one (query, head): `ring_keys` ring entries from `oldest` on (wrapping at R), then
// the piece's tokens first … query. A ring key n is at distance ring_keys − n + query from the
// query, a piece token t at query − t.
struct HeadKeys {
  const float* ring = nullptr;  // this head's part of entry 0 of the slice; null: no ring keys
  int ring_keys = 0;
  int oldest = 0;
  const float* piece = nullptr;  // q/k/v row of piece token 0
  int first = 0;
  int query = 0;
};

struct Key {
  const float* k;
  const float* v;
  bool biased;  // a projection row: add the k / v bias
  int distance;
};

__device__ __forceinline__ Key KeyAt(const Geometry& g, const HeadKeys& keys, int head, int n) {
  if (n < keys.ring_keys) {
    const int entry = (keys.oldest + n) % g.ring;
    const float* k = keys.ring + entry * EntryFloats(g);
    return {k, k + g.head_dim, false, keys.ring_keys - n + keys.query};
  }
  const int t = keys.first + n - keys.ring_keys;
  const int64_t hd = static_cast<int64_t>(g.heads) * g.head_dim;
  const float* k = keys.piece + t * 3 * hd + hd + static_cast<int64_t>(head) * g.head_dim;
  return {k, k + hd, true, keys.query - t};
}

// The rotation table: cos and sin of distance · base^(−2i / rotary_dim) for every distance a
// query sees, in double rounded to fp32 (the CPU's table).
__global__ void RotationTableKernel(Geometry g, int window, float* table) {
  AfterPriorKernel();
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t entries = static_cast<int64_t>(window) * g.half;
  if (n >= entries) return;
  const int64_t distance = n / g.half;
  const int64_t i = n % g.half;
  const double inv_freq = pow(g.rope_base, -2.0 * static_cast<double>(i) / g.rotary_dim);
  const double angle = static_cast<double>(distance) * inv_freq;
  table[n] = static_cast<float>(cos(angle));
  table[entries + n] = static_cast<float>(sin(angle));
}

// Dynamic shared memory of an attention block: q, the output accumulator, the tile's scores.
size_t AttendSharedBytes(const Geometry& g) {
  return sizeof(float) * (2 * static_cast<size_t>(g.head_dim) + kTile);
}

// softmax_n(q · RoPE_{−distance_n}(k_n) · scale) · v_n over the keys, into out (T [head_dim]).
// Called by the whole block, from uniform control flow.
template <typename T>
__device__ __forceinline__ void Attend(const Geometry& g, const HeadKeys& keys, int head,
                                       const float* q_row, const float* bias, T* out) {
  extern __shared__ float smem[];
  __shared__ float reduce[32];
  float* q = smem;
  float* acc = q + g.head_dim;
  float* scores = acc + g.head_dim;
  const int dh = g.head_dim;
  const int64_t hd = static_cast<int64_t>(g.heads) * dh;
  const float* q_bias = bias == nullptr ? nullptr : bias + static_cast<int64_t>(head) * dh;
  const float* k_bias = bias == nullptr ? nullptr : bias + hd + static_cast<int64_t>(head) * dh;
  const float* v_bias = k_bias == nullptr ? nullptr : k_bias + hd;
  const float* q_in = q_row + static_cast<int64_t>(head) * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    q[c] = q_in[c] + (q_bias != nullptr ? q_bias[c] : 0.0f);
    acc[c] = 0.0f;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int total = keys.ring_keys + keys.query - keys.first + 1;
  float run_max = -INFINITY;
  float sum = 0.0f;
  for (int tile = 0; tile < total; tile += kTile) {
    const int n_tile = min(kTile, total - tile);
    for (int j = warp; j < n_tile; j += kWarps) {
      const Key key = KeyAt(g, keys, head, tile + j);
      const float* kb = key.biased ? k_bias : nullptr;
      float dot = 0.0f;
      for (int i = lane; i < g.half; i += 32) {
        const int i2 = i + g.half;
        const float k1 = key.k[i] + (kb != nullptr ? kb[i] : 0.0f);
        const float k2 = key.k[i2] + (kb != nullptr ? kb[i2] : 0.0f);
        const int64_t at = static_cast<int64_t>(key.distance) * g.half + i;
        const float c = g.cos_table[at];
        const float s = g.sin_table[at];
        dot += q[i] * (k1 * c + k2 * s);
        dot += q[i2] * (k2 * c - k1 * s);
      }
      for (int i = 2 * g.half + lane; i < dh; i += 32) {
        dot += q[i] * (key.k[i] + (kb != nullptr ? kb[i] : 0.0f));
      }
      dot = WarpSum(dot);
      if (lane == 0) scores[j] = dot * g.scale;
    }
    __syncthreads();
    const int t = static_cast<int>(threadIdx.x);
    const float score = t < n_tile ? scores[t] : -INFINITY;
    const float new_max = fmaxf(run_max, BlockMax(score, reduce, -INFINITY));
    const float rescale = run_max == -INFINITY ? 0.0f : expf(run_max - new_max);
    const float p = t < n_tile ? expf(score - new_max) : 0.0f;
    if (t < n_tile) scores[t] = p;
    sum = sum * rescale + BlockSum(p, reduce);  // its barriers publish the weights
    run_max = new_max;
    for (int c = threadIdx.x; c < dh; c += blockDim.x) {
      float a = acc[c] * rescale;
      for (int j = 0; j < n_tile; ++j) {
        const Key key = KeyAt(g, keys, head, tile + j);
        const float vb = key.biased && v_bias != nullptr ? v_bias[c] : 0.0f;
        a += scores[j] * (key.v[c] + vb);
      }
      acc[c] = a;
    }
    __syncthreads();  // the next tile overwrites the scores
  }
  const float inv_sum = 1.0f / sum;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) out[c] = FromFloat<T>(acc[c] * inv_sum);
}

struct DecodeParams {
  Geometry g;
  const float* qkv;
  const float* bias;
  const int32_t* slots;
  float* state;
  int64_t slot_stride;
  int64_t layer_offset;
  void* out;
};

// Block (row, head): the attention of the row's token, then its k and v into entry next.
template <typename T>
__global__ void __launch_bounds__(kThreads, 1) DecodeKernel(DecodeParams p) {
  AfterPriorKernel();
  const Geometry& g = p.g;
  const int64_t row = blockIdx.x;
  const int head = blockIdx.y;
  const int dh = g.head_dim;
  const int64_t hd = static_cast<int64_t>(g.heads) * dh;
  const int slot = p.slots[row];
  float* slice =
      slot >= 0 ? p.state + static_cast<int64_t>(slot) * p.slot_stride + p.layer_offset : nullptr;
  HeadKeys keys;
  keys.piece = p.qkv + row * 3 * hd;
  int next = 0;
  if (slice != nullptr && g.ring > 0) {
    keys.ring = slice + static_cast<int64_t>(head) * 2 * dh;
    keys.ring_keys = static_cast<int>(slice[CountOffset(g)]);
    next = static_cast<int>(slice[CountOffset(g) + 1]);
    keys.oldest = (next - keys.ring_keys + g.ring) % g.ring;
  }
  T* out = static_cast<T*>(p.out) + row * hd + static_cast<int64_t>(head) * dh;
  Attend<T>(g, keys, head, keys.piece, p.bias, out);
  if (keys.ring == nullptr) return;
  __syncthreads();  // every read of the entry is done
  float* entry = slice + next * EntryFloats(g) + static_cast<int64_t>(head) * 2 * dh;
  const float* k = keys.piece + hd + static_cast<int64_t>(head) * dh;
  const float* k_bias = p.bias == nullptr ? nullptr : p.bias + hd + static_cast<int64_t>(head) * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    entry[c] = k[c] + (k_bias != nullptr ? k_bias[c] : 0.0f);
    entry[dh + c] = k[hd + c] + (k_bias != nullptr ? k_bias[hd + c] : 0.0f);
  }
}

struct PrefillParams {
  Geometry g;
  const float* qkv;  // the pass's rows
  const float* bias;
  PrefillTables tables;
  float* state;
  int64_t slot_stride;
  int64_t layer_offset;
  void* out;
};

// A pass row's piece: its rows of qkv, its slot's slice, and the row's index in it.
struct PieceRow {
  const float* qkv;
  float* slice;
  int rows;  // of the piece
  int i;     // the row's
};
__device__ __forceinline__ PieceRow RowOfPiece(const PrefillParams& p, int row) {
  const PrefillPiece piece = p.tables.pieces[PieceOfRow(p.tables, row)];
  const int64_t hd = static_cast<int64_t>(p.g.heads) * p.g.head_dim;
  return PieceRow{p.qkv + static_cast<int64_t>(piece.first_row) * 3 * hd,
                  p.state + static_cast<int64_t>(piece.slot) * p.slot_stride + p.layer_offset,
                  piece.rows, row - piece.first_row};
}

// Block (pass row, head), token i of its piece: it sees the ring's newest min(count, R − i)
// entries (none once i >= R) and the piece's tokens max(0, i − R) … i.
template <typename T>
__global__ void __launch_bounds__(kThreads) PrefillKernel(PrefillParams p) {
  AfterPriorKernel();
  const Geometry& g = p.g;
  const int row = blockIdx.x;
  const int head = blockIdx.y;
  const int dh = g.head_dim;
  const int64_t hd = static_cast<int64_t>(g.heads) * dh;
  const PieceRow r = RowOfPiece(p, row);
  const int i = r.i;
  HeadKeys keys;
  keys.piece = r.qkv;
  keys.query = i;
  keys.first = max(0, i - g.ring);
  if (g.ring > 0 && i < g.ring) {
    const int count = static_cast<int>(r.slice[CountOffset(g)]);
    const int next = static_cast<int>(r.slice[CountOffset(g) + 1]);
    keys.ring = r.slice + static_cast<int64_t>(head) * 2 * dh;
    keys.ring_keys = min(count, g.ring - i);
    keys.oldest = (next - keys.ring_keys + g.ring) % g.ring;
  }
  T* out =
      static_cast<T*>(p.out) + static_cast<int64_t>(row) * hd + static_cast<int64_t>(head) * dh;
  Attend<T>(g, keys, head, r.qkv + static_cast<int64_t>(i) * 3 * hd, p.bias, out);
}

// Block (pass row, head): a row among its piece's last min(rows, R) goes, as token t, into entry
// (next + t) mod R of its slot. Reads next; the counters move in the launch after.
__global__ void __launch_bounds__(kCopyThreads) WriteRingKernel(PrefillParams p) {
  AfterPriorKernel();
  const Geometry& g = p.g;
  const PieceRow r = RowOfPiece(p, static_cast<int>(blockIdx.x));
  const int t = r.i;
  if (t < r.rows - g.ring) return;
  const int head = blockIdx.y;
  const int dh = g.head_dim;
  const int64_t hd = static_cast<int64_t>(g.heads) * dh;
  const int next = static_cast<int>(r.slice[CountOffset(g) + 1]);
  float* entry =
      r.slice + ((next + t) % g.ring) * EntryFloats(g) + static_cast<int64_t>(head) * 2 * dh;
  const float* k = r.qkv + static_cast<int64_t>(t) * 3 * hd + hd + static_cast<int64_t>(head) * dh;
  const float* k_bias = p.bias == nullptr ? nullptr : p.bias + hd + static_cast<int64_t>(head) * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    entry[c] = k[c] + (k_bias != nullptr ? k_bias[c] : 0.0f);
    entry[dh + c] = k[hd + c] + (k_bias != nullptr ? k_bias[hd + c] : 0.0f);
  }
}

// count = min(count + tokens, R), next = (next + tokens) mod R of a slice.
__device__ __forceinline__ void Advance(const Geometry& g, float* slice, int tokens) {
  float* counters = slice + CountOffset(g);
  const int64_t count = static_cast<int64_t>(counters[0]);
  const int64_t next = static_cast<int64_t>(counters[1]);
  counters[0] = static_cast<float>(min(count + tokens, static_cast<int64_t>(g.ring)));
  counters[1] = static_cast<float>((next + tokens) % g.ring);
}

// One token for each of `rows` slices: slot slots[r] of `state`, skipping negative ones.
__global__ void AdvanceKernel(Geometry g, float* state, const int32_t* slots, int64_t slot_stride,
                              int64_t layer_offset, int rows) {
  AfterPriorKernel();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows || slots[r] < 0) return;
  Advance(g, state + static_cast<int64_t>(slots[r]) * slot_stride + layer_offset, 1);
}

// Each piece's rows for its slot's slice.
__global__ void AdvancePiecesKernel(PrefillParams p) {
  AfterPriorKernel();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.tables.piece_count) return;
  const PrefillPiece piece = p.tables.pieces[i];
  Advance(p.g, p.state + static_cast<int64_t>(piece.slot) * p.slot_stride + p.layer_offset,
          piece.rows);
}

// The rotation table's presence: a rotary shape needs one.
absl::Status CheckRotation(const SlidingWindowShape& shape, const float* table) {
  if (table == nullptr && SlidingWindowRotationFloats(shape) > 0) {
    return absl::InvalidArgumentError(
        "sliding_window_attention: rotation is null (LaunchSlidingWindowRotationTable's table)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSlidingWindowShape(const SlidingWindowShape& shape) {
  if (shape.heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding_window_attention: heads ", shape.heads, " < 1"));
  }
  if (shape.head_dim < 1 || shape.head_dim > kMaxSlidingWindowHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("sliding_window_attention: head_dim ",
                                                   shape.head_dim, " outside [1, ",
                                                   kMaxSlidingWindowHeadDim, "]"));
  }
  if (shape.window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding_window_attention: window ", shape.window, " < 1"));
  }
  if (shape.rotary_dim < 0 || shape.rotary_dim > shape.head_dim || shape.rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding_window_attention: rotary_dim ", shape.rotary_dim,
                     " is not even and in [0, head_dim = ", shape.head_dim, "]"));
  }
  return absl::OkStatus();
}

int64_t SlidingWindowRotationFloats(const SlidingWindowShape& shape) {
  return 2 * static_cast<int64_t>(shape.window) * (shape.rotary_dim / 2);
}

absl::Status LaunchSlidingWindowRotationTable(cudaStream_t stream, const SlidingWindowShape& shape,
                                              float* table) {
  LINSERVE_RETURN_IF_ERROR(CheckSlidingWindowShape(shape));
  const int64_t entries = SlidingWindowRotationFloats(shape) / 2;
  if (entries == 0) return absl::OkStatus();
  LINSERVE_RETURN_IF_ERROR(CheckRotation(shape, table));
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((entries + threads - 1) / threads);
  const Geometry g = MakeGeometry(shape, table);
  LaunchDependent(RotationTableKernel, blocks, threads, 0, stream, g, shape.window, table);
  return LaunchStatus("SlidingWindowRotationTableKernel", __FILE__, __LINE__);
}

absl::Status LaunchSlidingWindowDecode(cudaStream_t stream, const SlidingWindowDecodeArgs& args) {
  LINSERVE_RETURN_IF_ERROR(CheckSlidingWindowShape(args.shape));
  if (args.rows <= 0) return absl::OkStatus();
  DecodeParams p;
  p.g = MakeGeometry(args.shape, args.rotation);
  p.qkv = args.qkv;
  p.bias = args.qkv_bias;
  p.slots = args.slots;
  p.state = args.state;
  p.slot_stride = args.slot_stride;
  p.layer_offset = args.layer_offset;
  p.out = args.out;
  LINSERVE_RETURN_IF_ERROR(CheckRotation(args.shape, args.rotation));
  const size_t smem = AttendSharedBytes(p.g);
  const absl::Status attended = LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(DecodeKernel<T>, smem));
    LaunchDependent(DecodeKernel<T>, dim3(args.rows, args.shape.heads), kThreads, smem, stream, p);
    return LaunchStatus("SlidingWindowDecodeKernel", __FILE__, __LINE__);
  });
  LINSERVE_RETURN_IF_ERROR(attended);
  if (p.g.ring == 0) return absl::OkStatus();  // the counters stay 0
  LaunchDependent(AdvanceKernel, (args.rows + 127) / 128, 128, 0, stream, p.g, args.state,
                  args.slots, args.slot_stride, args.layer_offset, args.rows);
  return LaunchStatus("SlidingWindowAdvanceKernel", __FILE__, __LINE__);
}

absl::Status LaunchSlidingWindowPrefill(cudaStream_t stream, const SlidingWindowPrefillArgs& args) {
  LINSERVE_RETURN_IF_ERROR(CheckSlidingWindowShape(args.shape));
  const PrefillTables& t = args.tables;
  if (t.rows <= 0 || t.piece_count <= 0) return absl::OkStatus();
  PrefillParams p;
  p.g = MakeGeometry(args.shape, args.rotation);
  p.qkv = args.qkv;
  p.bias = args.qkv_bias;
  p.tables = t;
  p.state = args.state;
  p.slot_stride = args.slot_stride;
  p.layer_offset = args.layer_offset;
  p.out = args.out;
  LINSERVE_RETURN_IF_ERROR(CheckRotation(args.shape, args.rotation));
  const size_t smem = AttendSharedBytes(p.g);
  const absl::Status attended = LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(PrefillKernel<T>, smem));
    LaunchDependent(PrefillKernel<T>, dim3(t.rows, args.shape.heads), kThreads, smem, stream, p);
    return LaunchStatus("SlidingWindowPrefillKernel", __FILE__, __LINE__);
  });
  LINSERVE_RETURN_IF_ERROR(attended);
  if (p.g.ring == 0) return absl::OkStatus();  // no ring; the counters stay 0
  LaunchDependent(WriteRingKernel, dim3(t.rows, args.shape.heads), kCopyThreads, 0, stream, p);
  LINSERVE_RETURN_IF_ERROR(LaunchStatus("SlidingWindowWriteRingKernel", __FILE__, __LINE__));
  LaunchDependent(AdvancePiecesKernel, (t.piece_count + 127) / 128, 128, 0, stream, p);
  return LaunchStatus("SlidingWindowAdvanceKernel", __FILE__, __LINE__);
}

}  // namespace linserve::cuda
