// Row-major single-precision GEMM over OpenBLAS, for the general-shape products of the chunked
// attention (φ(Q)φ(K)ᵀ, A·V, φ(Q)·S, φ(K)ᵀ·V). The model's projections use PackedMatrix /
// Linear instead (packed_linear.h), which beats OpenBLAS for every batch size we run
// (bench/cpu_bench measures both). OpenBLAS chooses its kernels at run time by CPU model and
// shape, so nothing that promises a bitwise result across batch sizes (decode) may call Gemm.
#ifndef LINSERVE_KERNELS_CPU_BLAS_H_
#define LINSERVE_KERNELS_CPU_BLAS_H_

namespace linserve::cpu {

enum class Transpose { kNo, kYes };

// C = alpha · op(A) · op(B) + beta · C, all row-major; op(A) is m × k, op(B) is k × n, C is
// m × n; lda/ldb/ldc are the row strides of A, B and C as stored. Runs on the OpenBLAS thread
// count set by SetBlasThreads (threads.h).
void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_BLAS_H_
