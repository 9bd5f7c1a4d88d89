#include "kernels/cpu/aligned_buffer.h"

#include <new>

namespace linserve::cpu {

FloatBuffer::FloatBuffer(int64_t size) : size_(size) {
  if (size <= 0) {
    size_ = 0;
    return;
  }
  // std::aligned_alloc wants a size that is a multiple of the alignment.
  const int64_t bytes = (size * static_cast<int64_t>(sizeof(float)) + kAlignment - 1) /
                        kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<float*>(p));
}

}  // namespace linserve::cpu
