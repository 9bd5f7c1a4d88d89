// Linear layers y = act(x · Wᵀ + b) over weights repacked once into the panel layout our GEMM
// micro-kernel streams. W is [out_features, in_features] as nn.Linear stores it.
#ifndef LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_
#define LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/elementwise.h"

namespace linserve::cpu {

// A weight matrix in panels of kPanelWidth output features: panel p holds, for every input
// feature k in order, the weights W[16p .. 16p+15][k] (zero past out_features). Costs the
// same memory as the matrix (plus the padding of the last panel). Immutable after Pack.
class PackedMatrix {
 public:
  static constexpr int kPanelWidth = 16;

  PackedMatrix() = default;
  // Packs `w`, [out_features, in_features] row-major; both dimensions must be positive.
  static PackedMatrix Pack(const float* w, int64_t out_features, int64_t in_features);

  int64_t out_features() const { return out_features_; }
  int64_t in_features() const { return in_features_; }
  int64_t panels() const { return (out_features_ + kPanelWidth - 1) / kPanelWidth; }
  const float* panel(int64_t p) const { return data_.data() + p * kPanelWidth * in_features_; }
  // Bytes of weights one Linear call streams.
  int64_t bytes() const { return data_.size() * static_cast<int64_t>(sizeof(float)); }

 private:
  int64_t out_features_ = 0;
  int64_t in_features_ = 0;
  FloatBuffer data_;
};

enum class LinearOutput {
  kStore,       // y = act(x · Wᵀ + b)
  kAccumulate,  // y += act(x · Wᵀ + b)   (residual connections)
};

// For each of the `rows` rows of x (row stride ldx >= in_features) writes out_features values
// to y (row stride ldy >= out_features). bias (out_features floats) may be null. x and y must
// not overlap. Parallel over output panels on up to `num_threads` threads (ParallelFor).
//
// Every output element is computed by the same instruction sequence — a sequential fused
// multiply-add over k from zero, then bias, activation, accumulation — whatever `rows`, the
// row's index and the thread count, so results are bitwise independent of batch composition.
void Linear(const float* x, int64_t rows, int64_t ldx, const PackedMatrix& w, const float* bias,
            Activation act, LinearOutput output, float* y, int64_t ldy, int num_threads);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_PACKED_LINEAR_H_
