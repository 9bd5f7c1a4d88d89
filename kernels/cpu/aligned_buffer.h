// FloatBuffer: a fixed-size array of floats aligned to a cache line, left uninitialised so that
// large pools (the recurrent-state pool) cost no memory until their pages are first written.
#ifndef LINSERVE_KERNELS_CPU_ALIGNED_BUFFER_H_
#define LINSERVE_KERNELS_CPU_ALIGNED_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace linserve::cpu {

class FloatBuffer {
 public:
  static constexpr int64_t kAlignment = 64;

  FloatBuffer() = default;
  // Allocates `size` floats (contents indeterminate); throws std::bad_alloc on failure, as
  // operator new does.
  explicit FloatBuffer(int64_t size);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int64_t size_ = 0;
};

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_ALIGNED_BUFFER_H_
