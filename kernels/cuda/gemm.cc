#include "kernels/cuda/gemm.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/small_batch_linear.h"

namespace linserve::cuda {

// Owns the cuBLASLt descriptors of one (m, n, k, type, accumulate, alignments) combination.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr;
  cublasLtMatrixLayout_t x_layout = nullptr;
  cublasLtMatrixLayout_t y_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (y_layout != nullptr) cublasLtMatrixLayoutDestroy(y_layout);
    if (x_layout != nullptr) cublasLtMatrixLayoutDestroy(x_layout);
    if (w_layout != nullptr) cublasLtMatrixLayoutDestroy(w_layout);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBf16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// Largest power of two (capped at 256, cuBLASLt's default assumption) dividing the address.
int Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// RAII for the preference object, which only lives while a plan is being chosen.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(size_t workspace_bytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&gemm->handle_));
  auto workspace = DeviceBuffer::Allocate(workspace_bytes, "the cuBLASLt workspace");
  if (!workspace.ok()) return workspace.status();
  gemm->workspace_ = *std::move(workspace);
  auto arrivals = DeviceBuffer::Allocate(sizeof(unsigned), "the fused add + norm's counter");
  if (!arrivals.ok()) return arrivals.status();
  gemm->arrivals_ = *std::move(arrivals);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemset(gemm->arrivals_.data(), 0, sizeof(unsigned)));
  return gemm;
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::StatusOr<const Gemm::Plan*> Gemm::GetPlan(const PlanKey& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  const auto [m, n, k, type, accumulate, align_x, align_w, align_y] = key;
  const DType dtype = static_cast<DType>(type);
  const cudaDataType_t in_type = CudaType(dtype);
  auto plan = std::make_unique<Plan>();

  // Row-major y[m, n] is the column-major (n × m) matrix C = w · xᵀ. Read column-major, the
  // stored w is a (k × n) matrix A (w = Aᵀ) and the stored x a (k × m) matrix B (= xᵀ), so
  // C = Aᵀ · B: transa = T, transb = N, all leading dimensions the row lengths.
  LINSERVE_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->w_layout, in_type, k, n, k));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->x_layout, in_type, k, m, k));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->y_layout, CUDA_R_32F, n, m, n));

  Preference preference;
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference.pref));
  const uint64_t workspace_bytes = workspace_.size();
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  const uint32_t alignments[3] = {static_cast<uint32_t>(align_w), static_cast<uint32_t>(align_x),
                                  static_cast<uint32_t>(align_y)};
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignments[0],
      sizeof(uint32_t)));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignments[1],
      sizeof(uint32_t)));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignments[2],
      sizeof(uint32_t)));
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignments[2],
      sizeof(uint32_t)));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  LINSERVE_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->w_layout, plan->x_layout, plan->y_layout, plan->y_layout,
      preference.pref, 1, &heuristic, &found));
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for y[", m, ", ", n, "] = x[", m, ", ", k, "] · w[", n, ", ", k,
        "]ᵀ with ", DTypeName(dtype), " inputs", (accumulate ? " (accumulating)" : "")));
  }
  plan->algo = heuristic.algo;
  const Plan* result = plan.get();
  plans_.emplace(key, std::move(plan));
  return result;
}

absl::Status Gemm::Linear(cudaStream_t stream, DType dtype, const void* x, const void* w, float* y,
                          int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (m < 1 || n < 1 || k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm::Linear: m, n, k must be >= 1, got ", m, ", ", n, ", ", k));
  }
  if (SmallBatchLinearApplies(dtype, x, w, m, k)) {
    return LaunchSmallBatchLinear(stream, dtype, x, w, y, m, n, k, accumulate);
  }
  const PlanKey key{
      m, n, k, static_cast<int>(dtype), accumulate, Alignment(x), Alignment(w), Alignment(y)};
  absl::StatusOr<const Plan*> plan = GetPlan(key);
  if (!plan.ok()) return plan.status();
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  LINSERVE_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, (*plan)->desc, &alpha, w, (*plan)->w_layout, x, (*plan)->x_layout,
                     &beta, y, (*plan)->y_layout, y, (*plan)->y_layout, &(*plan)->algo,
                     workspace_.data(), workspace_.size(), stream));
  return absl::OkStatus();
}

absl::Status Gemm::LinearActivation(cudaStream_t stream, DType dtype, const void* x, const void* w,
                                    int64_t m, int64_t cols, int64_t k,
                                    const ActivationEpilogue& epilogue, float* scratch,
                                    void* hidden) {
  if (SmallBatchLinearApplies(dtype, x, w, m, k)) {
    return LaunchSmallBatchLinearActivation(stream, dtype, x, w, m, cols, k, epilogue, hidden);
  }
  LINSERVE_RETURN_IF_ERROR(
      Linear(stream, dtype, x, w, scratch, m, epilogue.gate ? 2 * cols : cols, k));
  if (epilogue.gate) {
    return LaunchBiasGate(stream, scratch, epilogue.bias, m, cols, epilogue.activation, dtype,
                          hidden);
  }
  return LaunchBiasActivation(stream, scratch, epilogue.bias, m, cols, epilogue.activation, dtype,
                              hidden);
}

absl::Status Gemm::LinearAddNorm(cudaStream_t stream, DType dtype, const void* x, const void* w,
                                 float* y, int64_t m, int64_t n, int64_t k, AddNormArgs then) {
  then.delta = y;
  if (SmallBatchLinearApplies(dtype, x, w, m, k)) {
    return LaunchSmallBatchLinearAddNorm(stream, dtype, x, w, y, m, n, k, then,
                                         arrivals_.as<unsigned>());
  }
  LINSERVE_RETURN_IF_ERROR(Linear(stream, dtype, x, w, y, m, n, k));
  return LaunchAddNorm(stream, then);
}

}  // namespace linserve::cuda
