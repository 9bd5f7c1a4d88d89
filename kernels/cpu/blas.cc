// A thin veneer over cblas_sgemm: row-major everywhere, our own Transpose enum so that callers
// do not include cblas.h. Nothing is re-implemented here; OpenBLAS picks its kernel for the
// machine at run time (DYNAMIC_ARCH).
#include "kernels/cpu/blas.h"

#include <cblas.h>

namespace linserve::cpu {

void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == Transpose::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Transpose::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

}  // namespace linserve::cpu
