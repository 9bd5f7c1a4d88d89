#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "spdlog/spdlog.h"

namespace linserve::cpu {

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

CpuIsa ChosenCpuIsa() {
  static const CpuIsa best =
      CpuSupports(CpuIsa::kAvx512Vnni) ? CpuIsa::kAvx512Vnni : CpuIsa::kAvx2;
  const char* env = std::getenv("LINSERVE_CPU_ISA");
  if (env == nullptr) return best;
  const std::string_view want(env);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (want == CpuIsaName(isa) && CpuSupports(isa)) return isa;
  }
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn(
        "LINSERVE_CPU_ISA={}: not one of avx2, avx512vnni that this CPU supports; using {}", want,
        CpuIsaName(best));
  }
  return best;
}

}  // namespace linserve::cpu
