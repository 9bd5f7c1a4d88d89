// BufferLayout: offsets of several buffers within one allocation, reserved before it is made, so
// that a set of buffers costs one allocation and its size is known (and checked) up front.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_BUFFER_LAYOUT_H_
#define LINSERVE_MODEL_BACKEND_CUDA_BUFFER_LAYOUT_H_

#include <cstddef>

namespace linserve {

class BufferLayout {
 public:
  // Reserves `bytes` at the next 256-byte boundary (every buffer suits any element type and
  // cuBLASLt's preferred alignment); returns its offset.
  size_t Reserve(size_t bytes) {
    const size_t offset = size_;
    size_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return offset;
  }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kAlignment = 256;
  size_t size_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_BUFFER_LAYOUT_H_
