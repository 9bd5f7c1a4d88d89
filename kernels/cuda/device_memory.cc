#include "kernels/cuda/device_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_status.h"

namespace linserve::cuda {

std::string FormatBytes(uint64_t bytes) {
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  if (b >= kKiB * kKiB * kKiB) return absl::StrFormat("%.2f GiB", b / (kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB) return absl::StrFormat("%.1f MiB", b / (kKiB * kKiB));
  if (b >= kKiB) return absl::StrFormat("%.1f KiB", b / kKiB);
  return absl::StrCat(bytes, " B");
}

namespace {

// Adds the device's free/total memory to an allocation error, which is what a user needs to
// pick a smaller budget.
absl::Status AllocationError(const absl::Status& cause, absl::string_view api, size_t bytes,
                             absl::string_view what) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  std::string memory;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    memory = absl::StrCat("; the device has ", FormatBytes(free_bytes), " free of ",
                          FormatBytes(total_bytes));
  }
  cudaGetLastError();
  return absl::Status(cause.code(), absl::StrCat(api, " of ", FormatBytes(bytes), " for ", what,
                                                 " failed", memory, ": ", cause.message()));
}

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, absl::string_view what) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  const cudaError_t error = cudaMalloc(&buffer.data_, bytes);
  if (error != cudaSuccess) {
    buffer.data_ = nullptr;
    return AllocationError(CudaErrorToStatus(error, "cudaMalloc(&data, bytes)", __FILE__, __LINE__),
                           "cudaMalloc", bytes, what);
  }
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, absl::string_view what) {
  PinnedBuffer buffer;
  if (bytes == 0) return buffer;
  const cudaError_t error = cudaMallocHost(&buffer.data_, bytes);
  if (error != cudaSuccess) {
    buffer.data_ = nullptr;
    return AllocationError(
        CudaErrorToStatus(error, "cudaMallocHost(&data, bytes)", __FILE__, __LINE__),
        "cudaMallocHost", bytes, what);
  }
  buffer.size_ = bytes;
  return buffer;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

absl::StatusOr<Stream> Stream::Create() {
  Stream stream;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream.stream_, cudaStreamNonBlocking));
  return stream;
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<Event> Event::Create() {
  Event event;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event.event_, cudaEventDisableTiming));
  return event;
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

GraphExec::GraphExec(GraphExec&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}

GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

GraphExec::~GraphExec() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
}

}  // namespace linserve::cuda
