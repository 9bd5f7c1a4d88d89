// Helpers shared by the GPU tests: skipping without a device, device arrays, error measures and
// the model variants every parity test runs over.
#ifndef LINSERVE_TESTS_GPU_GPU_TEST_UTIL_H_
#define LINSERVE_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "model/format/config.h"

namespace linserve::gpu_test {

// True when cudaGetDeviceCount reports a device; otherwise *reason says why not.
inline bool CudaDevicePresent(std::string* reason) {
  absl::StatusOr<int> count = cuda::CudaDeviceCount(reason);
  if (!count.ok()) {
    *reason = count.status().ToString();
    return false;
  }
  return *count > 0;
}

// First statement of every test that needs a GPU.
#define LINSERVE_SKIP_WITHOUT_CUDA_DEVICE()                                 \
  do {                                                                      \
    std::string linserve_skip_reason_;                                      \
    if (!::linserve::gpu_test::CudaDevicePresent(&linserve_skip_reason_)) { \
      GTEST_SKIP() << "no CUDA device: " << linserve_skip_reason_;          \
    }                                                                       \
  } while (false)

// A device copy of a host vector, read back with Download(). Aborts the test on CUDA errors
// (the test cannot continue without its buffers).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : size_(n) {
    absl::StatusOr<cuda::DeviceBuffer> buffer =
        cuda::DeviceBuffer::Allocate(std::max<size_t>(n, 1) * sizeof(T), "a test array");
    if (!buffer.ok()) {
      ADD_FAILURE() << buffer.status();
      std::abort();
    }
    buffer_ = *std::move(buffer);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }

  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), size_);
    EXPECT_EQ(cudaMemcpy(buffer_.data(), host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), buffer_.data(), size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  T* get() const { return buffer_.as<T>(); }
  size_t size() const { return size_; }

 private:
  size_t size_;
  cuda::DeviceBuffer buffer_;
};

// max|a − b| / max|b|: the error relative to the reference's largest magnitude (the measure
// the CPU backend's golden tests use).
inline double RelativeError(absl::Span<const float> a, absl::Span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

inline std::vector<int32_t> RandomTokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// Round-to-nearest-even fp32 -> bf16 -> fp32, as __float2bfloat16_rn does.
inline float RoundBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    bits |= 0x00400000u;  // NaN stays a (quiet) NaN
  } else {
    bits += 0x7FFFu + ((bits >> 16) & 1u);
  }
  bits &= 0xFFFF0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

inline float RoundFp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

struct Variant {
  std::string name;
  ModelConfig config;
  // The bound on the relative error of logits and state against the CPU with bf16 or fp16
  // weights (the GPU rounds every weight and GEMM input to 8 or 11 significant bits).
  double narrow_tolerance = 2e-2;
};

// Every value of every architecture field appears at least once: norm placement, the four
// feature maps, the three position schemes, the three activations, bias on/off, tied/untied;
// and every layer kind (model/layers/kinds.cc), alone and mixed.
std::vector<Variant> ModelVariants();

// A model of `n_layers` equal layers of these kinds (TinyConfig's byte vocabulary, d_model 32,
// no position embedding, pre-norm with a final `norm`), checked by ParseModelConfig.
ModelConfig LayerListConfig(const ComponentSpec& mixer, const ComponentSpec& norm,
                            const ComponentSpec& mlp, int n_layers = 2);

}  // namespace linserve::gpu_test

#endif  // LINSERVE_TESTS_GPU_GPU_TEST_UTIL_H_
