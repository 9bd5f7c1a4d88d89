#include "bench/compute_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace linserve::bench {
namespace {

// Each loop returns a value computed from every accumulator (lane 0 of their sum; a chain left
// out of it would be dead code), which the caller stores where the compiler cannot see it
// unread, so no loop can be optimised away.
volatile float g_sink = 0;

// Loop iterations per thread: tens of milliseconds at a few GHz for every loop below.
constexpr int64_t kIterations = int64_t{1} << 24;

// fp32 FMA on ymm: 12 independent chains cover 2 FMA ports × 4-6 cycles of latency.
__attribute__((target("avx2,fma"))) float Fp32Avx2(int64_t iterations) {
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  __m256 acc[12];
  for (__m256& x : acc) x = _mm256_setzero_ps();
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (__m256& x : acc) x = _mm256_fmadd_ps(x, a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

// fp32 FMA on zmm: 16 independent chains.
__attribute__((target("avx512f"))) float Fp32Avx512(int64_t iterations) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  __m512 acc[16];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 16
    for (__m512& x : acc) x = _mm512_fmadd_ps(x, a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

// int8 dot as int8_linear.cc's AVX2 path: vpmaddubsw (unsigned × signed bytes, pairs summed to
// int16), vpmaddwd by ones (pairs summed to int32), vpaddd into the accumulator. Only the
// accumulation is loop-carried, so the multiplies would be hoisted out of the loop as
// invariants; the empty asm tells the compiler the unsigned operand changes every iteration
// (it costs no instruction). Four chains with distinct operands (the compiler would merge equal
// ones), held in named variables (an array under the asm would live in memory): with b, the ones
// and a product in flight per chain that is 14 of the 16 ymm registers and nothing in memory
// (six chains spill two accumulators). The chains' products are independent across iterations,
// so out-of-order execution overlaps their latency.
__attribute__((target("avx2"), always_inline)) inline void Int8Step(__m256i& a, __m256i& acc,
                                                                   __m256i b, __m256i ones) {
  asm("" : "+x"(a));
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
}

__attribute__((target("avx2"))) float Int8Avx2(int64_t iterations) {
  const __m256i b = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  __m256i a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3),
          a3 = _mm256_set1_epi8(4);
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
  for (int64_t n = 0; n < iterations; ++n) {
    Int8Step(a0, c0, b, ones);
    Int8Step(a1, c1, b, ones);
    Int8Step(a2, c2, b, ones);
    Int8Step(a3, c3, b, ones);
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
  return static_cast<float>(_mm256_extract_epi32(s, 0));
}

// int8 dot as int8_linear.cc's AVX-512 VNNI path: vpdpbusd on zmm, 16 independent chains. The
// intrinsic, not inline asm: an asm operand bound to an array element keeps the array in memory,
// and a store and reload per chain and iteration held the loop to a third of the instruction's
// throughput (measured on the benchmark host: 285 against 847 GOP/s per core). GCC meets the
// intrinsic's non-destructive form with a register copy per chain, which costs no execution port.
LINSERVE_TARGET_AVX512_VNNI float Int8Avx512Vnni(int64_t iterations) {
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(3);
  __m512i acc[16];
  for (__m512i& x : acc) x = _mm512_setzero_si512();
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 16
    for (__m512i& x : acc) x = _mm512_dpbusd_epi32(x, a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, s);
  return static_cast<float>(lanes[0]);
}

// vdpbf16ps on zmm (pairs of bf16 products summed into fp32), 16 independent chains.
__attribute__((target("avx512f,avx512bf16"))) float Bf16Avx512(int64_t iterations) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  __m512 acc[16];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 16
    for (__m512& x : acc) x = _mm512_dpbf16_ps(x, a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

// Operations per thread and seconds of the best of 3 runs of `loop` on `threads` threads
// released together, as ops per second.
double OpsPerSecond(int threads, double ops_per_iteration, float (*loop)(int64_t)) {
  double best = 1e300;
  for (int repeat = 0; repeat < 3; ++repeat) {
    std::atomic<bool> go{false};
    std::vector<float> results(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        while (!go.load(std::memory_order_acquire)) {
        }
        results[t] = loop(kIterations);
      });
    }
    const auto start = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (std::thread& t : pool) t.join();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                              .count());
    for (float r : results) g_sink = g_sink + r;
  }
  return ops_per_iteration * static_cast<double>(kIterations) * threads / best;
}

}  // namespace

ComputePeaks MeasureComputePeaks(int threads, cpu::CpuIsa isa) {
  ComputePeaks p;
  p.isa = isa;
  switch (isa) {
    case cpu::CpuIsa::kAvx2:
      // 12 FMAs × 8 lanes × 2 FLOPs; 4 dots × 32 byte products × 2 ops.
      p.fp32_gflops = OpsPerSecond(threads, 12 * 8 * 2, Fp32Avx2) / 1e9;
      p.int8_gops = OpsPerSecond(threads, 4 * 32 * 2, Int8Avx2) / 1e9;
      break;
    case cpu::CpuIsa::kAvx512Vnni:
      // 16 FMAs × 16 lanes × 2 FLOPs; 16 vpdpbusd × 64 byte products × 2 ops.
      p.fp32_gflops = OpsPerSecond(threads, 16 * 16 * 2, Fp32Avx512) / 1e9;
      p.int8_gops = OpsPerSecond(threads, 16 * 64 * 2, Int8Avx512Vnni) / 1e9;
      break;
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    // 16 vdpbf16ps × 32 bf16 products × 2 FLOPs.
    p.avx512_bf16_gflops = OpsPerSecond(threads, 16 * 32 * 2, Bf16Avx512) / 1e9;
  }
  return p;
}

}  // namespace linserve::bench
