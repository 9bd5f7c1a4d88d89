// ComputePeak: the host's arithmetic peak per weight format, measured the way a roofline's
// compute ceiling is: register-only loops of one instruction (sequence) over many independent
// accumulators on every thread at once, no memory traffic. cpu_bench reports its GEMMs and
// prefill as a share of the peak of the format they run (issue 28).
//
// Which instructions, on the path kernels/cpu/cpu_isa.h chooses:
//   fp32: vfmadd231ps, ymm on AVX2, zmm on AVX-512 (packed_linear.cc's FMAs);
//   int8: the int8 kernels' dot (int8_linear.cc): on AVX2 vpmaddubsw + vpmaddwd + vpaddd per
//         32 byte products; on AVX-512 VNNI vpdpbusd (zmm) per 64. The kernels' other per-dot
//         instructions (AVX2's vpsignb/vpabsb, the per-block fp32 rescale) are their overhead,
//         so they count against the kernels' share of this peak, not in it;
//   bf16 (and fp16): our kernels widen the weights to fp32 and run the fp32 FMAs, so that every
//         host and path gives bitwise the same results; their compute peak IS the fp32 peak.
// For reference only, where the host has AVX512_BF16: vdpbf16ps's peak (bf16 pairs into fp32),
// an instruction our kernels do not use, because it rounds the activations to bf16 and sums
// pairs in an order of its own, which would make the results differ from the fp32 reference
// and between hosts with and without it.
#ifndef LINSERVE_BENCH_COMPUTE_PEAK_H_
#define LINSERVE_BENCH_COMPUTE_PEAK_H_

#include <optional>

#include "kernels/cpu/cpu_isa.h"

namespace linserve::bench {

struct ComputePeaks {
  cpu::CpuIsa isa = cpu::CpuIsa::kAvx2;  // the path measured
  double fp32_gflops = 0;                // 2 FLOPs per fused multiply-add lane
  double int8_gops = 0;                  // 2 ops per byte product summed
  // vdpbf16ps (2 FLOPs per bf16 product summed); absent where the host lacks AVX512_BF16.
  std::optional<double> avx512_bf16_gflops;
};

// Runs each loop on `threads` threads released together, best of 3, about 0.1 s each, on the
// instruction path `isa` (which the host must support).
ComputePeaks MeasureComputePeaks(int threads, cpu::CpuIsa isa);

}  // namespace linserve::bench

#endif  // LINSERVE_BENCH_COMPUTE_PEAK_H_
