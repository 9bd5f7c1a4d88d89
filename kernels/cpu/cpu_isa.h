// CpuIsa: which instruction-set path a kernel with runtime dispatch runs. AVX2 + FMA (x86-64-v3)
// is the baseline every supported host has; AVX-512 (F, BW, VL) with VNNI is used where the CPU
// has it. The paths compute bitwise identical results (each kernel states why), so the choice
// changes speed only.
#ifndef LINSERVE_KERNELS_CPU_CPU_ISA_H_
#define LINSERVE_KERNELS_CPU_CPU_ISA_H_

#include <string_view>

// Marks a function compiled for the AVX-512 VNNI path (the rest of kernels/cpu is compiled for
// x86-64-v3); call it only where ChosenCpuIsa() or CpuSupports says the CPU has it.
#define LINSERVE_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace linserve::cpu {

enum class CpuIsa {
  kAvx2,
  kAvx512Vnni,  // AVX-512 F + BW + VL + VNNI
};

std::string_view CpuIsaName(CpuIsa isa);

// Whether this host's CPU can run `isa` (__builtin_cpu_supports).
bool CpuSupports(CpuIsa isa);

// The path dispatching kernels run: the environment variable LINSERVE_CPU_ISA ("avx2" or
// "avx512vnni") when set to a path this host supports, otherwise the best path it supports.
// Default (unset): the best supported path. A value that is unknown or unsupported here is
// logged once (spdlog warning) and ignored. Read at every call, so tests can switch paths between
// calls (setenv while no kernel runs).
CpuIsa ChosenCpuIsa();

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_CPU_ISA_H_
