// Owning handles for device memory, pinned host memory, streams and instantiated CUDA graphs.
// Allocation failures come back as absl::Status naming what was being allocated and its size,
// so an out-of-memory at start reads e.g. "cudaMalloc of 2.50 GiB for the state pool ...".
#ifndef LINSERVE_KERNELS_CUDA_DEVICE_MEMORY_H_
#define LINSERVE_KERNELS_CUDA_DEVICE_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linserve::cuda {

// "1.50 GiB", "12.0 MiB", "512 B": sizes in error messages and logs.
std::string FormatBytes(uint64_t bytes);

// A cudaMalloc'd region; movable, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the buffer in the error ("the state pool (426 slots)").
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, absl::string_view what);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A cudaMallocHost'd (page-locked) region, so that copies can be asynchronous and captured in a
// CUDA graph.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes, absl::string_view what);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A non-blocking stream, destroyed with the handle.
class Stream {
 public:
  Stream() = default;
  static absl::StatusOr<Stream> Create();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A CUDA event without timing (a point in a stream to wait for), destroyed with the handle.
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// An instantiated graph, destroyed with the handle.
class GraphExec {
 public:
  GraphExec() = default;
  // Takes ownership of `exec`.
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  GraphExec(GraphExec&& other) noexcept;
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  cudaGraphExec_t get() const { return exec_; }
  explicit operator bool() const { return exec_ != nullptr; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DEVICE_MEMORY_H_
