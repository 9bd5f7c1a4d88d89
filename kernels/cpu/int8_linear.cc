// Why integers: widening each int8 weight to fp32 and running the fp32 FMA sequence costs about
// four instructions per 8 weights (vpmovsxbd, vcvtdq2ps, vmulps, vfmadd) per row, which kept the
// batch-1 step well below the memory floor of 1.125-byte weights and batched steps compute-bound
// (bench/results/cpu_llamacpp.md). With the activations quantized too, one instruction multiplies
// and sums 64 weight bytes (AVX-512 VNNI's vpdpbusd) or four handle 32 (AVX2's vpsignb,
// vpmaddubsw, vpmaddwd, vpaddd), and the fp32 work drops to one FMA per block of 32.
//
// Layout (packed_matrix.h): a panel block is 16 scales, then 8 groups of 64 bytes, each holding
// 4 consecutive k for each of the 16 outputs — the int32 lane c of a group is output c's 4
// weights, which is the lane layout both instruction sequences produce, so both stream the
// panel contiguously with no shuffles.
//
// AVX2: vpmaddubsw multiplies unsigned by signed bytes; the broadcast activations (4 bytes) are
// made unsigned (vpabsb) and their signs moved onto the weights (vpsignb), so each int16 pair sum
// is at most 2 · 127 · 127 = 32258 < 32767: no saturation, exact. AVX-512 VNNI: vpdpbusd
// multiplies unsigned by signed bytes into int32 without saturation; the weights are made
// unsigned by adding 128 (xor 0x80) and 128 · Σ q_a over the block (QuantizeActivations' sums)
// is subtracted again: exact. Weights are loaded once per group and used for a tile of rows
// (AVX2: up to 4 rows, AVX-512: up to 8), so batches reuse each loaded weight; a single row
// streams each weight byte once. Threads split panels as Linear does.
#include "kernels/cpu/int8_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/linear_epilogue.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/threads.h"

namespace linserve::cpu {
namespace {

using linear_internal::Epilogue;
using linear_internal::FinishRows;
using linear_internal::kWidth;
using linear_internal::PanelEpilogue;

constexpr int kBlock = PackedMatrix::kInt8Block;
constexpr int kGroups = kBlock / 4;
constexpr int64_t kBlockBytes = kWidth * 4 + kBlock * kWidth;  // 16 scales + 32 · 16 int8
static_assert(kBlock == 32, "QuantizeActivations packs a block as four vectors of 8");

constexpr int kAvx2Rows = 4;
constexpr int kAvx512Rows = 8;

// The quantized activations, block b of row r at index r · blocks + b.
struct Activations {
  const int8_t* q;
  const float* scales;
  const int32_t* sums;
  int64_t blocks;
};

int32_t Load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// dot[16 i + c] = the fp32 accumulation (int8_linear.h, step 3) of output c of `panel` for row
// r0 + i, i < kRows.
template <int kRows>
void Avx2Tile(const Activations& a, int64_t r0, const std::byte* panel, float* __restrict dot) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    _mm256_store_ps(dot + kWidth * i, _mm256_setzero_ps());
    _mm256_store_ps(dot + kWidth * i + 8, _mm256_setzero_ps());
  }
  for (int64_t b = 0; b < a.blocks; ++b) {
    const std::byte* block = panel + b * kBlockBytes;
    const int8_t* q[kRows];
    __m256i lo[kRows], hi[kRows];
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      q[i] = a.q + ((r0 + i) * a.blocks + b) * kBlock;
      lo[i] = hi[i] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) {
      const __m256i* group = reinterpret_cast<const __m256i*>(block + kWidth * 4 + g * 64);
      const __m256i w_lo = _mm256_load_si256(group);
      const __m256i w_hi = _mm256_load_si256(group + 1);
#pragma GCC unroll 8
      for (int i = 0; i < kRows; ++i) {
        const __m256i av = _mm256_set1_epi32(Load4(q[i] + 4 * g));
        const __m256i au = _mm256_abs_epi8(av);
        lo[i] = _mm256_add_epi32(
            lo[i], _mm256_madd_epi16(_mm256_maddubs_epi16(au, _mm256_sign_epi8(w_lo, av)), ones));
        hi[i] = _mm256_add_epi32(
            hi[i], _mm256_madd_epi16(_mm256_maddubs_epi16(au, _mm256_sign_epi8(w_hi, av)), ones));
      }
    }
    const float* w_scales = reinterpret_cast<const float*>(block);
    const __m256 ws_lo = _mm256_load_ps(w_scales);
    const __m256 ws_hi = _mm256_load_ps(w_scales + 8);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m256 s = _mm256_set1_ps(a.scales[(r0 + i) * a.blocks + b]);
      float* d = dot + kWidth * i;
      _mm256_store_ps(d, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo[i]), _mm256_mul_ps(ws_lo, s),
                                         _mm256_load_ps(d)));
      _mm256_store_ps(d + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi[i]),
                                             _mm256_mul_ps(ws_hi, s), _mm256_load_ps(d + 8)));
    }
  }
}

// As Avx2Tile, on 16 lanes: the same fp32 operations per output in the same order.
template <int kRows>
LINSERVE_TARGET_AVX512_VNNI void Avx512Tile(const Activations& a, int64_t r0,
                                            const std::byte* panel, float* __restrict dot) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[kRows];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.blocks; ++b) {
    const std::byte* block = panel + b * kBlockBytes;
    const int8_t* q[kRows];
    // Two integer chains per row (even and odd groups) halve the vpdpbusd latency chain of a
    // single row.
    __m512i even[kRows], odd[kRows];
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      q[i] = a.q + ((r0 + i) * a.blocks + b) * kBlock;
      even[i] = odd[i] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; g += 2) {
      const __m512i* group = reinterpret_cast<const __m512i*>(block + kWidth * 4 + g * 64);
      const __m512i w0 = _mm512_xor_si512(_mm512_load_si512(group), flip);      // q_w + 128
      const __m512i w1 = _mm512_xor_si512(_mm512_load_si512(group + 1), flip);  // q_w + 128
#pragma GCC unroll 8
      for (int i = 0; i < kRows; ++i) {
        even[i] = _mm512_dpbusd_epi32(even[i], w0, _mm512_set1_epi32(Load4(q[i] + 4 * g)));
        odd[i] = _mm512_dpbusd_epi32(odd[i], w1, _mm512_set1_epi32(Load4(q[i] + 4 * g + 4)));
      }
    }
    const __m512 ws = _mm512_load_ps(reinterpret_cast<const float*>(block));
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const int64_t index = (r0 + i) * a.blocks + b;
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(even[i], odd[i]),
                                            _mm512_set1_epi32(128 * a.sums[index]));
      // (maskz with all lanes: _mm512_cvtepi32_ps trips GCC 12's -Wmaybe-uninitialized.)
      acc[i] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, isum),
                               _mm512_mul_ps(ws, _mm512_set1_ps(a.scales[index])), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) _mm512_store_ps(dot + kWidth * i, acc[i]);
}

void Avx2Rows(int64_t n, const Activations& a, int64_t r0, const std::byte* panel, float* dot) {
  switch (n) {
    case 1:
      return Avx2Tile<1>(a, r0, panel, dot);
    case 2:
      return Avx2Tile<2>(a, r0, panel, dot);
    case 3:
      return Avx2Tile<3>(a, r0, panel, dot);
    case 4:
      return Avx2Tile<4>(a, r0, panel, dot);
  }
}

LINSERVE_TARGET_AVX512_VNNI void Avx512Rows(int64_t n, const Activations& a, int64_t r0,
                                            const std::byte* panel, float* dot) {
  switch (n) {
    case 1:
      return Avx512Tile<1>(a, r0, panel, dot);
    case 2:
      return Avx512Tile<2>(a, r0, panel, dot);
    case 3:
      return Avx512Tile<3>(a, r0, panel, dot);
    case 4:
      return Avx512Tile<4>(a, r0, panel, dot);
    case 5:
      return Avx512Tile<5>(a, r0, panel, dot);
    case 6:
      return Avx512Tile<6>(a, r0, panel, dot);
    case 7:
      return Avx512Tile<7>(a, r0, panel, dot);
    case 8:
      return Avx512Tile<8>(a, r0, panel, dot);
  }
}

// Panels [begin, end) for all rows: the rows in the fewest tiles of at most the path's tile
// height, as evenly as possible (a tile of one row has the fewest independent chains).
void Panels(const Activations& a, int64_t rows, const PackedMatrix& w, int64_t begin, int64_t end,
            const float* bias, Activation act, LinearOutput output, float* y, int64_t ldy,
            CpuIsa isa) {
  const int64_t max_rows = isa == CpuIsa::kAvx512Vnni ? kAvx512Rows : kAvx2Rows;
  const int64_t tiles = (rows + max_rows - 1) / max_rows;
  const int64_t base = rows / tiles;
  const int64_t longer = rows % tiles;  // the first `longer` tiles take base + 1 rows
  alignas(64) float dot[kAvx512Rows * kWidth];
  for (int64_t p = begin; p < end; ++p) {
    const Epilogue e = PanelEpilogue(w, p, bias, act, output);
    int64_t r = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t n = base + (t < longer ? 1 : 0);
      if (isa == CpuIsa::kAvx512Vnni) {
        Avx512Rows(n, a, r, w.panel(p), dot);
      } else {
        Avx2Rows(n, a, r, w.panel(p), dot);
      }
      FinishRows(e, dot, n, y + r * ldy + p * kWidth, ldy);
      r += n;
    }
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t rows, int64_t ldx, int64_t in_features,
                         int8_t* q, float* scales, int32_t* sums) {
  const int64_t blocks = (in_features + kBlock - 1) / kBlock;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i q_max = _mm256_set1_epi32(127);
  const __m256i q_min = _mm256_set1_epi32(-127);
  // vpackssdw / vpacksswb pack within 128-bit lanes; this puts the 4-byte pieces back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t index = r * blocks + b;
      const float* xb = x + r * ldx + b * kBlock;
      const int64_t n = std::min<int64_t>(kBlock, in_features - b * kBlock);
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      __m256 nan = _mm256_setzero_ps();
      for (int j = 0; j < 4; ++j) {
        const int64_t count = std::clamp<int64_t>(n - 8 * j, 0, 8);
        v[j] = count == 8 ? _mm256_loadu_ps(xb + 8 * j)
                          : _mm256_maskload_ps(xb + 8 * j, simd::TailMask(count));
        amax = _mm256_max_ps(amax, _mm256_and_ps(v[j], abs_mask));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[j], v[j], _CMP_UNORD_Q));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, amax);
      float m = lanes[0];
      for (int l = 1; l < 8; ++l) m = std::max(m, lanes[l]);
      if (_mm256_movemask_ps(nan) != 0) m = std::numeric_limits<float>::quiet_NaN();
      const float scale = m / 127.0f;
      scales[index] = scale;
      int8_t* qb = q + index * kBlock;
      if (scale == 0.0f) {
        std::memset(qb, 0, kBlock);
        sums[index] = 0;
        continue;
      }
      const __m256 s = _mm256_set1_ps(scale);
      __m256i qi[4];
      for (int j = 0; j < 4; ++j) {
        // cvtps rounds under the default rounding mode: to nearest, ties to even. A NaN
        // converts to INT_MIN, which the clamp brings to -127.
        qi[j] = _mm256_max_epi32(
            _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_div_ps(v[j], s)), q_max), q_min);
      }
      const __m256i total = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]),
                                             _mm256_add_epi32(qi[2], qi[3]));
      alignas(32) int32_t parts[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(parts), total);
      int32_t sum = 0;
      for (int32_t part : parts) sum += part;
      sums[index] = sum;
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
                                               _mm256_packs_epi32(qi[2], qi[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb),
                          _mm256_permutevar8x32_epi32(bytes, order));
    }
  }
}

void Int8Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w,
                const float* bias, Activation act, LinearOutput output, float* y, int64_t ldy,
                int num_threads, CpuIsa isa) {
  if (rows <= 0) return;
  const int64_t blocks = (w.in_features() + kBlock - 1) / kBlock;
  // Reused across calls on this thread, so a step allocates nothing once warm.
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> scales;
  thread_local std::vector<int32_t> sums;
  q.resize(static_cast<size_t>(rows * blocks * kBlock));
  scales.resize(static_cast<size_t>(rows * blocks));
  sums.resize(static_cast<size_t>(rows * blocks));
  QuantizeActivations(x, rows, ldx, w.in_features(), q.data(), scales.data(), sums.data());
  const Activations a{q.data(), scales.data(), sums.data(), blocks};

  const int64_t panels = w.panels();
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsForWork(num_threads, rows * w.in_features() * w.out_features()), panels));
  // As Linear: a few contiguous runs of panels per thread.
  const int64_t tasks = std::min<int64_t>(panels, int64_t{4} * threads);
  ParallelFor(threads, tasks, [&](int64_t task, int) {
    Panels(a, rows, w, panels * task / tasks, panels * (task + 1) / tasks, bias, act, output, y,
           ldy, isa);
  });
}

}  // namespace linserve::cpu
