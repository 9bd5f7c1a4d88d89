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
//
// bf16 and fp16 panels are widened to fp32 in registers (bf16: zero-extend and shift;
// fp16: vcvtph2ps) and go through the same FMA sequence as fp32, which keeps every output
// bitwise independent of the batch and exactly the fp32 Linear over the dequantized weights,
// which the tests check bitwise. int8 multiplies in integers instead (int8_linear.h). A step
// of up to kMaxRows rows (decode) widens each weight as it streams it (FusedTile); a single row
// has only two FMA chains per panel, which the 4-cycle FMA latency would hold below the DRAM
// rate of 1–2-byte weights, so small row counts run several panels side by side. More rows
// (batched decode, prefill) widen each panel once into a per-thread fp32 buffer and run the fp32
// micro-kernel over it for every tile of rows, so the widening is paid once per panel, not per
// row.
//
// The AVX-512 path (cpu_isa.h) holds a panel's 16 outputs in one register instead of two halves
// of 8 and runs the same fused multiply-adds in the same order per output (the widening is
// exact either way), so its results are bitwise AVX2's; its tiles write their sums to a small
// buffer and the epilogue (linear_epilogue.h) runs outside the AVX-512 code, the same
// instructions on every path. With one register per row, a 6-row tile of one panel would hold
// only 6 FMA chains, so fp32 (and the widened bf16/fp16 panels) run two panels per tile there
// (Avx512PairTile), a thread's odd last panel alone.
#include "kernels/cpu/packed_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/linear_epilogue.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/threads.h"

namespace linserve::cpu {
namespace {

using linear_internal::Epilogue;
using linear_internal::Finish;
using linear_internal::FinishRows;
using linear_internal::kWidth;
using linear_internal::PanelEpilogue;

constexpr int kMaxRows = 6;  // rows of the register tile
constexpr int kMaxAccumulators = 12;

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

// Tile on 16 lanes: dot[16 i + c] gets output c of row i's dot product, with the same fused
// multiply-adds in the same order as Tile's two 8-lane halves.
template <int kRows>
LINSERVE_TARGET_AVX512_VNNI void Avx512Tile(const float* __restrict x, int64_t ldx,
                                            const float* __restrict panel, int64_t k_dim,
                                            float* __restrict dot, const float* prefetch) {
  __m512 acc[kRows];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_dim; ++k) {
    const __m512 wk = _mm512_load_ps(panel + k * kWidth);
    if (prefetch != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kWidth), _MM_HINT_T1);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k]), wk, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) _mm512_store_ps(dot + i * kWidth, acc[i]);
}

LINSERVE_TARGET_AVX512_VNNI void Avx512TileOfRows(int64_t n, const float* x, int64_t ldx,
                                                  const float* panel, int64_t k_dim, float* dot,
                                                  const float* prefetch) {
  switch (n) {
    case 1:
      return Avx512Tile<1>(x, ldx, panel, k_dim, dot, prefetch);
    case 2:
      return Avx512Tile<2>(x, ldx, panel, k_dim, dot, prefetch);
    case 3:
      return Avx512Tile<3>(x, ldx, panel, k_dim, dot, prefetch);
    case 4:
      return Avx512Tile<4>(x, ldx, panel, k_dim, dot, prefetch);
    case 5:
      return Avx512Tile<5>(x, ldx, panel, k_dim, dot, prefetch);
    case 6:
      return Avx512Tile<6>(x, ldx, panel, k_dim, dot, prefetch);
  }
}

// Avx512Tile over two panels side by side: each row's broadcast serves both, and the 2 × kRows
// accumulators (12 at 6 rows) keep both FMA pipes of a Zen 5 or Sapphire Rapids core busy, where
// one panel's 6 chains wait on the FMA latency (bench/results/cpu.md: the prefill GEMMs reached
// 60% of the fp32 compute peak with one panel per tile). Every output gets Avx512Tile's
// multiply-adds in the same order, so the results are bitwise the same. `prefetch0` and
// `prefetch1` (both or neither) are the next pair's panels.
template <int kRows>
LINSERVE_TARGET_AVX512_VNNI void Avx512PairTile(const float* __restrict x, int64_t ldx,
                                                const float* __restrict panel0,
                                                const float* __restrict panel1, int64_t k_dim,
                                                float* __restrict dot0, float* __restrict dot1,
                                                const float* prefetch0, const float* prefetch1) {
  __m512 acc0[kRows];
  __m512 acc1[kRows];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < k_dim; ++k) {
    const __m512 w0 = _mm512_load_ps(panel0 + k * kWidth);
    const __m512 w1 = _mm512_load_ps(panel1 + k * kWidth);
    if (prefetch0 != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch0 + k * kWidth), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(prefetch1 + k * kWidth), _MM_HINT_T1);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i * ldx + k]);
      acc0[i] = _mm512_fmadd_ps(xi, w0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(xi, w1, acc1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    _mm512_store_ps(dot0 + i * kWidth, acc0[i]);
    _mm512_store_ps(dot1 + i * kWidth, acc1[i]);
  }
}

LINSERVE_TARGET_AVX512_VNNI void Avx512PairTileOfRows(int64_t n, const float* x, int64_t ldx,
                                                      const float* panel0, const float* panel1,
                                                      int64_t k_dim, float* dot0, float* dot1,
                                                      const float* prefetch0,
                                                      const float* prefetch1) {
  switch (n) {
    case 1:
      return Avx512PairTile<1>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
    case 2:
      return Avx512PairTile<2>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
    case 3:
      return Avx512PairTile<3>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
    case 4:
      return Avx512PairTile<4>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
    case 5:
      return Avx512PairTile<5>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
    case 6:
      return Avx512PairTile<6>(x, ldx, panel0, panel1, k_dim, dot0, dot1, prefetch0, prefetch1);
  }
}

void TileOfRows(int64_t n, const float* x, int64_t ldx, const float* panel, int64_t k_dim,
                const Epilogue& e, float* y, int64_t ldy, const float* prefetch, CpuIsa isa) {
  if (isa == CpuIsa::kAvx512Vnni) {
    alignas(64) float dot[kMaxRows * kWidth];
    Avx512TileOfRows(n, x, ldx, panel, k_dim, dot, prefetch);
    return FinishRows(e, dot, n, y, ldy);
  }
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

// Rows are split into the fewest tiles of at most kMaxRows, as evenly as possible: a tile of
// 1–2 rows has too few independent FMA chains to hide the FMA latency, so 32 rows run as
// 6+6+5+5+5+5 rather than 6·5+2. Calls tile(first_row, rows, index) for each.
template <class F>
void ForEachTile(int64_t rows, const F& tile) {
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows;
  const int64_t base = rows / tiles;
  const int64_t longer = rows % tiles;  // the first `longer` tiles take base + 1 rows
  int64_t r = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = base + (t < longer ? 1 : 0);
    tile(r, n, t);
    r += n;
  }
}

// All rows for fp32 panel p. `next` is the panel this thread computes next (or null).
void Fp32Panel(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, int64_t p,
               const float* next, const float* bias, Activation act, LinearOutput output,
               float* y, int64_t ldy, CpuIsa isa) {
  const Epilogue e = PanelEpilogue(w, p, bias, act, output);
  const float* panel = reinterpret_cast<const float*>(w.panel(p));
  ForEachTile(rows, [&](int64_t r, int64_t n, int64_t t) {
    // The first tile streams this panel from DRAM; the others find it in cache. The second
    // prefetches the next panel, so that its first tile does not wait on DRAM either (+20%
    // at 32 rows).
    TileOfRows(n, x + r * ldx, ldx, panel, w.in_features(), e, y + r * ldy + p * kWidth, ldy,
               t == 1 ? next : nullptr, isa);
  });
}

// All rows for the fp32 panels p and p + 1 on the AVX-512 path, one pair tile per tile of rows.
// `next0` and `next1` are the panels this thread computes next (both or neither).
void Fp32PanelPair(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, int64_t p,
                   const float* panel0, const float* panel1, const float* next0,
                   const float* next1, const float* bias, Activation act, LinearOutput output,
                   float* y, int64_t ldy) {
  const Epilogue e0 = PanelEpilogue(w, p, bias, act, output);
  const Epilogue e1 = PanelEpilogue(w, p + 1, bias, act, output);
  ForEachTile(rows, [&](int64_t r, int64_t n, int64_t t) {
    alignas(64) float dot0[kMaxRows * kWidth];
    alignas(64) float dot1[kMaxRows * kWidth];
    // As in Fp32Panel: the second tile prefetches the next pair.
    Avx512PairTileOfRows(n, x + r * ldx, ldx, panel0, panel1, w.in_features(), dot0, dot1,
                         t == 1 ? next0 : nullptr, t == 1 ? next1 : nullptr);
    FinishRows(e0, dot0, n, y + r * ldy + p * kWidth, ldy);
    FinishRows(e1, dot1, n, y + r * ldy + (p + 1) * kWidth, ldy);
  });
}

// ---- bf16, fp16 ----------------------------------------------------------------------
// Each format walks a panel in blocks of kBlock input features: Offset(k0) is where the block
// starting at k0 lies in the panel, Bytes(n) its size for n features, and Block::Load(i) the 16
// fp32 weights of its i-th feature (lanes 0–7, 8–15).

struct Bf16Format {
  static constexpr int64_t kBlock = 32;
  static int64_t Offset(int64_t k0) { return k0 * kWidth * 2; }
  static int64_t Bytes(int64_t n) { return n * kWidth * 2; }
  struct Block {
    const std::byte* data;
    void Load(int64_t i, __m256& lo, __m256& hi) const {
      const __m128i* h = reinterpret_cast<const __m128i*>(data + i * 32);
      lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(h)), 16));
      hi = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(h + 1)), 16));
    }
    LINSERVE_TARGET_AVX512_VNNI __m512 Load512(int64_t i) const {
      // maskz with all lanes: the unmasked forms trip GCC 12's -Wmaybe-uninitialized.
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i * 32));
      return _mm512_castsi512_ps(
          _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
    }
  };
  static Block At(const std::byte* panel, int64_t k0) { return {panel + Offset(k0)}; }
};

struct Fp16Format {
  static constexpr int64_t kBlock = 32;
  static int64_t Offset(int64_t k0) { return k0 * kWidth * 2; }
  static int64_t Bytes(int64_t n) { return n * kWidth * 2; }
  struct Block {
    const std::byte* data;
    void Load(int64_t i, __m256& lo, __m256& hi) const {
      lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i * 32)));
      hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i * 32 + 16)));
    }
    LINSERVE_TARGET_AVX512_VNNI __m512 Load512(int64_t i) const {
      return _mm512_maskz_cvtph_ps(
          0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + i * 32)));
    }
  };
  static Block At(const std::byte* panel, int64_t k0) { return {panel + Offset(k0)}; }
};

// Panels that run side by side for a tile of kRows rows: as many as fit in the 12 accumulators.
template <int kRows>
constexpr int kPanelsPerTile = kMaxAccumulators / (2 * kRows);

// y rows [0, kRows) of kPanels consecutive panels starting at p, widening as it streams.
template <class F, int kRows, int kPanels>
void FusedTile(const float* __restrict x, int64_t ldx, const PackedMatrix& w, int64_t p,
               const float* bias, Activation act, LinearOutput output, float* __restrict y,
               int64_t ldy) {
  static_assert(kPanels >= 1 && 2 * kRows * kPanels <= kMaxAccumulators);
  const int64_t k_dim = w.in_features();
  __m256 lo[kPanels][kRows];
  __m256 hi[kPanels][kRows];
#pragma GCC unroll 8
  for (int j = 0; j < kPanels; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) lo[j][i] = hi[j][i] = _mm256_setzero_ps();
  }
  for (int64_t k0 = 0; k0 < k_dim; k0 += F::kBlock) {
    const int64_t n = std::min(F::kBlock, k_dim - k0);
    typename F::Block block[kPanels];
#pragma GCC unroll 8
    for (int j = 0; j < kPanels; ++j) block[j] = F::At(w.panel(p + j), k0);
    for (int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 8
      for (int j = 0; j < kPanels; ++j) {
        __m256 w_lo, w_hi;
        block[j].Load(k, w_lo, w_hi);
#pragma GCC unroll 8
        for (int i = 0; i < kRows; ++i) {
          const __m256 xi = _mm256_broadcast_ss(x + i * ldx + k0 + k);
          lo[j][i] = _mm256_fmadd_ps(xi, w_lo, lo[j][i]);
          hi[j][i] = _mm256_fmadd_ps(xi, w_hi, hi[j][i]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kPanels; ++j) {
    const Epilogue e = PanelEpilogue(w, p + j, bias, act, output);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) Finish(e, lo[j][i], hi[j][i], y + i * ldy + (p + j) * kWidth);
  }
}

// FusedTile on 16 lanes: dot[16 (j · kRows + i) + c] gets output c of panel p + j for row i,
// with the same fused multiply-adds in the same order.
template <class F, int kRows, int kPanels>
LINSERVE_TARGET_AVX512_VNNI void Avx512FusedTile(const float* __restrict x, int64_t ldx,
                                                 const PackedMatrix& w, int64_t p,
                                                 float* __restrict dot) {
  const int64_t k_dim = w.in_features();
  __m512 acc[kPanels][kRows];
#pragma GCC unroll 8
  for (int j = 0; j < kPanels; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  for (int64_t k0 = 0; k0 < k_dim; k0 += F::kBlock) {
    const int64_t n = std::min(F::kBlock, k_dim - k0);
    typename F::Block block[kPanels];
#pragma GCC unroll 8
    for (int j = 0; j < kPanels; ++j) block[j] = F::At(w.panel(p + j), k0);
    for (int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 8
      for (int j = 0; j < kPanels; ++j) {
        const __m512 wk = block[j].Load512(k);
#pragma GCC unroll 8
        for (int i = 0; i < kRows; ++i) {
          acc[j][i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k0 + k]), wk, acc[j][i]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kPanels; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) _mm512_store_ps(dot + (j * kRows + i) * kWidth, acc[j][i]);
  }
}

// kPanels panels from p for kRows rows on the given path.
template <class F, int kRows, int kPanels>
void FusedGroup(const float* x, int64_t ldx, const PackedMatrix& w, int64_t p, const float* bias,
                Activation act, LinearOutput output, float* y, int64_t ldy, CpuIsa isa) {
  if (isa == CpuIsa::kAvx512Vnni) {
    alignas(64) float dot[kPanels * kRows * kWidth];
    Avx512FusedTile<F, kRows, kPanels>(x, ldx, w, p, dot);
    for (int j = 0; j < kPanels; ++j) {
      FinishRows(PanelEpilogue(w, p + j, bias, act, output), dot + j * kRows * kWidth, kRows,
                 y + (p + j) * kWidth, ldy);
    }
    return;
  }
  FusedTile<F, kRows, kPanels>(x, ldx, w, p, bias, act, output, y, ldy);
}

// Panels [begin, end) for kRows (<= kMaxRows) rows, kPanelsPerTile<kRows> at a time.
template <class F, int kRows>
void FusedPanels(const float* x, int64_t ldx, const PackedMatrix& w, int64_t begin, int64_t end,
                 const float* bias, Activation act, LinearOutput output, float* y, int64_t ldy,
                 CpuIsa isa) {
  constexpr int kGroup = kPanelsPerTile<kRows>;
  int64_t p = begin;
  for (; p + kGroup <= end; p += kGroup) {
    FusedGroup<F, kRows, kGroup>(x, ldx, w, p, bias, act, output, y, ldy, isa);
  }
  if constexpr (kGroup > 1) {
    for (; p < end; ++p) FusedGroup<F, kRows, 1>(x, ldx, w, p, bias, act, output, y, ldy, isa);
  }
}

template <class F>
void FusedRows(int64_t rows, const float* x, int64_t ldx, const PackedMatrix& w, int64_t begin,
               int64_t end, const float* bias, Activation act, LinearOutput output, float* y,
               int64_t ldy, CpuIsa isa) {
  switch (rows) {
    case 1:
      return FusedPanels<F, 1>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
    case 2:
      return FusedPanels<F, 2>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
    case 3:
      return FusedPanels<F, 3>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
    case 4:
      return FusedPanels<F, 4>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
    case 5:
      return FusedPanels<F, 5>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
    case 6:
      return FusedPanels<F, 6>(x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
  }
}

// out[k · 16 + c] = the fp32 weight of panel p's column c at input feature k, for every k.
// Pulls `next` (the panel this thread widens next, or null) towards L2 as it goes.
template <class F>
void Widen(const PackedMatrix& w, int64_t p, const std::byte* next, float* __restrict out) {
  const int64_t k_dim = w.in_features();
  for (int64_t k0 = 0; k0 < k_dim; k0 += F::kBlock) {
    const int64_t n = std::min(F::kBlock, k_dim - k0);
    if (next != nullptr) {
      const std::byte* from = next + F::Offset(k0);
      for (int64_t b = 0; b < F::Bytes(n); b += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(from + b), _MM_HINT_T1);
      }
    }
    const typename F::Block block = F::At(w.panel(p), k0);
    for (int64_t k = 0; k < n; ++k) {
      __m256 lo, hi;
      block.Load(k, lo, hi);
      _mm256_store_ps(out + (k0 + k) * kWidth, lo);
      _mm256_store_ps(out + (k0 + k) * kWidth + 8, hi);
    }
  }
}

// Panels [begin, end) for any number of rows: each panel widened once into this thread's
// buffer, then the fp32 tiles over it.
template <class F>
void WidenedPanels(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w,
                   int64_t begin, int64_t end, const float* bias, Activation act,
                   LinearOutput output, float* y, int64_t ldy, CpuIsa isa) {
  thread_local FloatBuffer buffer;
  const int64_t floats = w.in_features() * kWidth;
  if (buffer.size() < 2 * floats) buffer = FloatBuffer(2 * floats);
  int64_t p = begin;
  if (isa == CpuIsa::kAvx512Vnni) {
    // Two panels at a time through the pair tile, as Panels does for fp32.
    for (; p + 2 <= end; p += 2) {
      Widen<F>(w, p, w.panel(p + 1), buffer.data());
      Widen<F>(w, p + 1, p + 2 < end ? w.panel(p + 2) : nullptr, buffer.data() + floats);
      Fp32PanelPair(x, rows, ldx, w, p, buffer.data(), buffer.data() + floats, nullptr, nullptr,
                    bias, act, output, y, ldy);
    }
  }
  for (; p < end; ++p) {
    Widen<F>(w, p, p + 1 < end ? w.panel(p + 1) : nullptr, buffer.data());
    const Epilogue e = PanelEpilogue(w, p, bias, act, output);
    ForEachTile(rows, [&](int64_t r, int64_t n, int64_t) {
      TileOfRows(n, x + r * ldx, ldx, buffer.data(), w.in_features(), e,
                 y + r * ldy + p * kWidth, ldy, nullptr, isa);
    });
  }
}

template <class F>
void QuantizedPanels(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w,
                     int64_t begin, int64_t end, const float* bias, Activation act,
                     LinearOutput output, float* y, int64_t ldy, CpuIsa isa) {
  if (rows <= kMaxRows) {
    FusedRows<F>(rows, x, ldx, w, begin, end, bias, act, output, y, ldy, isa);
  } else {
    WidenedPanels<F>(x, rows, ldx, w, begin, end, bias, act, output, y, ldy, isa);
  }
}

// Panels [begin, end) of w for all rows.
void Panels(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, int64_t begin,
            int64_t end, const float* bias, Activation act, LinearOutput output, float* y,
            int64_t ldy, CpuIsa isa) {
  switch (w.format()) {
    case WeightFormat::kFp32: {
      const auto panel = [&](int64_t q) {
        return q < end ? reinterpret_cast<const float*>(w.panel(q)) : nullptr;
      };
      int64_t p = begin;
      if (isa == CpuIsa::kAvx512Vnni) {
        for (; p + 2 <= end; p += 2) {
          // Prefetch the next pair, or the last odd panel alone (twice: both or neither).
          const float* next0 = panel(p + 2);
          const float* next1 = panel(p + 3) != nullptr ? panel(p + 3) : next0;
          Fp32PanelPair(x, rows, ldx, w, p, panel(p), panel(p + 1), next0, next1, bias, act,
                        output, y, ldy);
        }
      }
      for (; p < end; ++p) {
        Fp32Panel(x, rows, ldx, w, p, panel(p + 1), bias, act, output, y, ldy, isa);
      }
      return;
    }
    case WeightFormat::kBf16:
      return QuantizedPanels<Bf16Format>(x, rows, ldx, w, begin, end, bias, act, output, y, ldy,
                                         isa);
    case WeightFormat::kFp16:
      return QuantizedPanels<Fp16Format>(x, rows, ldx, w, begin, end, bias, act, output, y, ldy,
                                         isa);
    case WeightFormat::kInt8:
      return;  // Linear hands int8 to Int8Linear
  }
}

}  // namespace

void Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, const float* bias,
            Activation act, LinearOutput output, float* y, int64_t ldy, int num_threads) {
  if (rows <= 0) return;
  const CpuIsa isa = ChosenCpuIsa();
  if (w.format() == WeightFormat::kInt8) {
    return Int8Linear(x, rows, ldx, w, bias, act, output, y, ldy, num_threads, isa);
  }
  const int64_t panels = w.panels();
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsForWork(num_threads, rows * w.in_features() * w.out_features()), panels));
  // A few contiguous runs of panels per thread: long sequential streams for the prefetcher,
  // and enough tasks that a thread which falls behind is caught up by the others.
  const int64_t tasks = std::min<int64_t>(panels, int64_t{4} * threads);
  ParallelFor(threads, tasks, [&](int64_t task, int) {
    Panels(x, rows, ldx, w, panels * task / tasks, panels * (task + 1) / tasks, bias, act, output,
           y, ldy, isa);
  });
}

}  // namespace linserve::cpu
