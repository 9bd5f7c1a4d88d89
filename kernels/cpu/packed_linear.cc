// Why a packed GEMM of our own rather than cblas_sgemm: decode multiplies a handful of rows
// (one per session) by every weight matrix, so the weights are streamed from DRAM once per step
// and nothing is reused. OpenBLAS packs the weight operand on every call — a full extra read and
// write of the matrix — which at M = 1..32 costs more than the multiply (bench/cpu_bench shows
// OpenBLAS at roughly half our throughput there). Packing once at load into panels of 16 output
// features, k-major, turns each call into one sequential stream per thread through the weights,
// which the hardware prefetcher follows at close to the measured DRAM bandwidth, while the
// 6 × 16 register tile (12 AVX2 accumulators, 2 weight loads + 6 broadcasts per 12 FMAs) keeps
// larger M (decode batches, prefill chunks) compute-bound; there a software prefetch of the next
// panel hides the DRAM stream behind the tiles that reuse the current one from cache. Threads
// take contiguous runs of panels.
#include "kernels/cpu/packed_linear.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/threads.h"

namespace linserve::cpu {
namespace {

constexpr int kWidth = PackedMatrix::kPanelWidth;
constexpr int kMaxRows = 6;  // rows of the register tile

inline __m256 Activate(Activation act, __m256 v) {
  switch (act) {
    case Activation::kNone:
      return v;
    case Activation::kGelu:
      return simd::Gelu(v);
    case Activation::kGeluTanh:
      return simd::GeluTanh(v);
    case Activation::kRelu:
      return simd::Relu(v);
    case Activation::kSilu:
      return simd::Silu(v);
    case Activation::kSigmoid:
      return simd::Sigmoid(v);
  }
  return v;
}

struct Epilogue {
  const float* bias;  // this panel's 16 bias values, or null
  Activation act;
  LinearOutput output;
  int cols;  // valid columns of this panel, 1..16
};

inline void Finish(const Epilogue& e, __m256 lo, __m256 hi, float* y) {
  if (e.cols == kWidth) {
    if (e.bias != nullptr) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(e.bias));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(e.bias + 8));
    }
    lo = Activate(e.act, lo);
    hi = Activate(e.act, hi);
    if (e.output == LinearOutput::kAccumulate) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(y));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(y + 8));
    }
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  const __m256i mlo = simd::TailMask(std::min(e.cols, 8));
  const __m256i mhi = simd::TailMask(std::max(e.cols - 8, 0));
  if (e.bias != nullptr) {
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(e.bias, mlo));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(e.bias + 8, mhi));
  }
  lo = Activate(e.act, lo);
  hi = Activate(e.act, hi);
  if (e.output == LinearOutput::kAccumulate) {
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(y, mlo));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(y + 8, mhi));
  }
  _mm256_maskstore_ps(y, mlo, lo);
  _mm256_maskstore_ps(y + 8, mhi, hi);
}

// y[i][0..cols) for i < kRows: one register tile over the whole k range. With `prefetch` set,
// also pulls that panel (same size) towards L2, one 64-byte k-row per iteration.
template <int kRows>
void Tile(const float* __restrict x, int64_t ldx, const float* __restrict panel, int64_t k_dim,
          const Epilogue& e, float* __restrict y, int64_t ldy, const float* prefetch) {
  __m256 lo[kRows];
  __m256 hi[kRows];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k_dim; ++k) {
    const __m256 w_lo = _mm256_load_ps(panel + k * kWidth);
    const __m256 w_hi = _mm256_load_ps(panel + k * kWidth + 8);
    if (prefetch != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kWidth), _MM_HINT_T1);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + i * ldx + k);
      lo[i] = _mm256_fmadd_ps(xi, w_lo, lo[i]);
      hi[i] = _mm256_fmadd_ps(xi, w_hi, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) Finish(e, lo[i], hi[i], y + i * ldy);
}

void TileOfRows(int64_t n, const float* x, int64_t ldx, const float* panel, int64_t k_dim,
                const Epilogue& e, float* y, int64_t ldy, const float* prefetch) {
  switch (n) {
    case 1:
      return Tile<1>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
    case 2:
      return Tile<2>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
    case 3:
      return Tile<3>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
    case 4:
      return Tile<4>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
    case 5:
      return Tile<5>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
    case 6:
      return Tile<6>(x, ldx, panel, k_dim, e, y, ldy, prefetch);
  }
}

// All rows for panel p. `next` is the panel this thread computes next (or null).
void Panel(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, int64_t p,
           const float* next, const float* bias, Activation act, LinearOutput output, float* y,
           int64_t ldy) {
  const int64_t col0 = p * kWidth;
  const Epilogue e{bias != nullptr ? bias + col0 : nullptr, act, output,
                   static_cast<int>(std::min<int64_t>(kWidth, w.out_features() - col0))};
  // Rows are split into the fewest tiles of at most kMaxRows, as evenly as possible: a tile of
  // 1–2 rows has too few independent FMA chains to hide the FMA latency, so 32 rows run as
  // 6+6+5+5+5+5 rather than 6·5+2.
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows;
  const int64_t base = rows / tiles;
  const int64_t longer = rows % tiles;  // the first `longer` tiles take base + 1 rows
  int64_t r = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = base + (t < longer ? 1 : 0);
    // The first tile streams this panel from DRAM; the others find it in cache. The second
    // prefetches the next panel, so that its first tile does not wait on DRAM either (+20%
    // at 32 rows).
    TileOfRows(n, x + r * ldx, ldx, w.panel(p), w.in_features(), e, y + r * ldy + col0, ldy,
               t == 1 ? next : nullptr);
    r += n;
  }
}

}  // namespace

PackedMatrix PackedMatrix::Pack(const float* w, int64_t out_features, int64_t in_features) {
  PackedMatrix m;
  m.out_features_ = out_features;
  m.in_features_ = in_features;
  m.data_ = FloatBuffer(m.panels() * kWidth * in_features);
  for (int64_t p = 0; p < m.panels(); ++p) {
    float* dst = m.data_.data() + p * kWidth * in_features;
    for (int64_t c = 0; c < kWidth; ++c) {
      const int64_t row = p * kWidth + c;
      if (row < out_features) {
        const float* src = w + row * in_features;
        for (int64_t k = 0; k < in_features; ++k) dst[k * kWidth + c] = src[k];
      } else {
        for (int64_t k = 0; k < in_features; ++k) dst[k * kWidth + c] = 0.0f;
      }
    }
  }
  return m;
}

void Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, const float* bias,
            Activation act, LinearOutput output, float* y, int64_t ldy, int num_threads) {
  if (rows <= 0) return;
  const int64_t panels = w.panels();
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsForWork(num_threads, rows * w.in_features() * w.out_features()), panels));
  // A few contiguous runs of panels per thread: long sequential streams for the prefetcher,
  // and enough tasks that a thread which falls behind is caught up by the others.
  const int64_t tasks = std::min<int64_t>(panels, int64_t{4} * threads);
  ParallelFor(threads, tasks, [&](int64_t task, int) {
    const int64_t end = panels * (task + 1) / tasks;
    for (int64_t p = panels * task / tasks; p < end; ++p) {
      Panel(x, rows, ldx, w, p, p + 1 < end ? w.panel(p + 1) : nullptr, bias, act, output, y,
            ldy);
    }
  });
}

}  // namespace linserve::cpu
