// MT19937-64, bit-for-bit the generator std::mt19937_64 is (same seeding, twist and tempering),
// written so that host and device share one definition: the device sampler draws from the same
// stream a host Sampler with the same seed would, which is what makes device sampling
// reproducible against the host's (tests/gpu compare the two, and the host side of this header
// against std::mt19937_64).
#ifndef LINSERVE_KERNELS_CUDA_MT19937_64_H_
#define LINSERVE_KERNELS_CUDA_MT19937_64_H_

#include <cstdint>

#if defined(__CUDACC__)
#define LINSERVE_HOST_DEVICE __host__ __device__
#else
#define LINSERVE_HOST_DEVICE
#endif

namespace linserve::cuda {

struct Mt19937_64 {
  static constexpr int kStateWords = 312;
  static constexpr int kShift = 156;

  uint64_t words[kStateWords];
  int32_t index;

  // std::mt19937_64(seed)'s state: init_genrand64.
  LINSERVE_HOST_DEVICE void Seed(uint64_t seed) {
    words[0] = seed;
    for (int i = 1; i < kStateWords; ++i) {
      words[i] =
          6364136223846793005ULL * (words[i - 1] ^ (words[i - 1] >> 62)) + static_cast<uint64_t>(i);
    }
    index = kStateWords;
  }

  LINSERVE_HOST_DEVICE uint64_t Next() {
    if (index >= kStateWords) Twist();
    uint64_t y = words[index++];
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    y ^= y >> 43;
    return y;
  }

 private:
  LINSERVE_HOST_DEVICE void Twist() {
    constexpr uint64_t kUpper = 0xFFFFFFFF80000000ULL;
    constexpr uint64_t kLower = 0x7FFFFFFFULL;
    constexpr uint64_t kMatrix = 0xB5026F5AA96619E9ULL;
    for (int i = 0; i < kStateWords; ++i) {
      const uint64_t x = (words[i] & kUpper) | (words[(i + 1) % kStateWords] & kLower);
      uint64_t next = x >> 1;
      if (x & 1ULL) next ^= kMatrix;
      words[i] = words[(i + kShift) % kStateWords] ^ next;
    }
    index = 0;
  }
};

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_MT19937_64_H_
