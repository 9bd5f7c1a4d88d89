// Linked into the test binaries that ctest runs once per OpenBLAS core type (tests/model/
// compute.cmake): OpenBLAS picks its kernels at run time by CPU model (OPENBLAS_CORETYPE
// overrides the choice), and a result that depends on that choice passes on one machine and
// fails on another. Those runs set OPENBLAS_CORETYPE for OpenBLAS and LINSERVE_TEST_OPENBLAS_CORE
// to the same name for this check. Before any test runs, it asserts that the forced core is the
// one in use — so each run really covers the code path it is named after — and skips the whole
// binary where the host cannot execute that core's instructions. Without the variable (a plain
// run, whatever OPENBLAS_CORETYPE the machine sets) it does nothing.
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

extern "C" char* openblas_get_corename(void);

namespace linserve {
namespace {

// Whether this CPU can run the kernels of OpenBLAS core `core` (the names of OpenBLAS 0.3.21's
// x86-64 DYNAMIC_ARCH table that an x86-64-v3 host can select).
// nullopt for a name outside that table.
std::optional<bool> HostRuns(const std::string& core) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
  if (absl::EqualsIgnoreCase(core, "haswell") || absl::EqualsIgnoreCase(core, "zen")) return avx2;
  if (absl::EqualsIgnoreCase(core, "skylakex")) return avx512;
  if (absl::EqualsIgnoreCase(core, "cooperlake")) {
    return avx512 && __builtin_cpu_supports("avx512bf16");
  }
  return std::nullopt;
}

class ForcedOpenBlasCore : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* forced = std::getenv("LINSERVE_TEST_OPENBLAS_CORE");
    if (forced == nullptr) return;
    const std::optional<bool> runs = HostRuns(forced);
    ASSERT_TRUE(runs.has_value()) << "unknown OpenBLAS core " << forced;
    if (!*runs) GTEST_SKIP() << "this CPU cannot run OpenBLAS core " << forced;
    const std::string in_use = openblas_get_corename();
    ASSERT_TRUE(absl::EqualsIgnoreCase(in_use, forced))
        << "OPENBLAS_CORETYPE=" << forced << " but OpenBLAS runs core " << in_use;
  }
};

const ::testing::Environment* const kForcedOpenBlasCore =
    ::testing::AddGlobalTestEnvironment(new ForcedOpenBlasCore);

}  // namespace
}  // namespace linserve
