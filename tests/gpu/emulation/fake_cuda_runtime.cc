// The CUDA runtime and cuBLASLt entry points that kernels/cuda, the CUDA backend and the GPU
// tests call, over host memory, for the emulation build only. Streams execute in order at
// enqueue; capture records every operation of the captured stream (copies, memsets, kernel
// launches, matmuls) into a graph that cudaGraphLaunch replays, so the graph code paths run.
// cudaMalloc poisons fresh memory and accounts against an emulated 80 GiB device, so that
// uninitialised reads and out-of-memory handling are exercised too.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "tests/gpu/emulation/launch_log.h"

namespace emu {

struct Graph {
  std::vector<std::function<void()>> ops;
};

namespace {
cudaStream_t g_capturing_stream = nullptr;
Graph* g_capture = nullptr;
int64_t g_host_enqueues = 0;
}  // namespace

int64_t HostEnqueues() { return g_host_enqueues; }

bool RecordIfCapturing(cudaStream_t stream, const std::function<void()>& op) {
  if (g_capture == nullptr) {
    ++g_host_enqueues;
    return false;
  }
  if (stream != g_capturing_stream) {
    std::fprintf(stderr, "emulation: work on another stream while one is being captured\n");
    std::abort();
  }
  g_capture->ops.push_back(op);
  return true;
}

void Enqueue(cudaStream_t stream, const std::function<void()>& op) {
  if (!RecordIfCapturing(stream, op)) op();
}

}  // namespace emu

namespace {

constexpr size_t kDeviceBytes = size_t{80} << 30;
std::map<void*, size_t> g_allocations;
size_t g_allocated = 0;
intptr_t g_streams = 0;
int64_t g_host_waits = 0;

// A synchronous call on the stream being captured is illegal in CUDA.
cudaError_t CheckNotCapturing(cudaStream_t stream) {
  return emu::g_capture != nullptr && stream == emu::g_capturing_stream
             ? cudaErrorStreamCaptureUnsupported
             : cudaSuccess;
}

struct MatmulDesc {
  cublasComputeType_t compute;
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
};
struct MatrixLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

float Load(cudaDataType_t type, const void* base, int64_t i) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[i];
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(base)[i]);
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      std::fprintf(stderr, "emulation: matmul input type %d\n", static_cast<int>(type));
      std::abort();
  }
}

}  // namespace

namespace emu {

int64_t HostWaits() { return g_host_waits; }

}  // namespace emu

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (bytes > kDeviceBytes - g_allocated) return cudaErrorMemoryAllocation;
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*ptr, 0xA5, bytes);
  g_allocations[*ptr] = bytes;
  g_allocated += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto it = g_allocations.find(ptr);
  if (it == g_allocations.end()) return cudaErrorInvalidValue;
  g_allocated -= it->second;
  g_allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes);
  return *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  emu::Enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  emu::Enqueue(stream, [=] {
    for (size_t r = 0; r < height; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dpitch,
                   static_cast<const char*>(src) + r * spitch, width);
    }
  });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  emu::Enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = reinterpret_cast<cudaStream_t>(++g_streams * 16);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ++g_host_waits;
  return CheckNotCapturing(stream);
}
cudaError_t cudaDeviceSynchronize() {
  ++g_host_waits;
  return CheckNotCapturing(emu::g_capturing_stream);
}
// Streams run their work as it is enqueued, so an event has always been reached; recording one
// while capturing is refused, as a recorded event is not part of what linserve captures.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(++g_streams * 16);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t stream) { return CheckNotCapturing(stream); }
// Every event has been reached (above): a query says so, and a wait has nothing to wait for.
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t, unsigned int) {
  return CheckNotCapturing(stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  ++g_host_waits;
  return CheckNotCapturing(emu::g_capturing_stream);
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
// An H100's or H200's limits, for the attributes the code reads.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  if (attribute != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorNotSupported;
  *value = 227 * 1024;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* properties, int) {
  std::memset(properties, 0, sizeof(*properties));
  std::strcpy(properties->name, "emulated CUDA device");
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = 132;
  properties->totalGlobalMem = kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  return cudaGetDeviceProperties_v2(properties, device);
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = kDeviceBytes - g_allocated;
  *total_bytes = kDeviceBytes;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated error";
}
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    default:
      return "cudaErrorEmulated";
  }
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (emu::g_capture != nullptr) return cudaErrorIllegalState;
  emu::g_capture = new emu::Graph;
  emu::g_capturing_stream = stream;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (emu::g_capture == nullptr || stream != emu::g_capturing_stream) {
    return cudaErrorIllegalState;
  }
  *graph = reinterpret_cast<cudaGraph_t>(emu::g_capture);
  emu::g_capture = nullptr;
  emu::g_capturing_stream = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new emu::Graph(*reinterpret_cast<emu::Graph*>(graph)));
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<emu::Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<emu::Graph*>(exec);
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (emu::g_capture != nullptr) return cudaErrorStreamCaptureUnsupported;
  (void)stream;
  ++emu::g_host_enqueues;
  for (const auto& op : reinterpret_cast<emu::Graph*>(exec)->ops) op();
  return cudaSuccess;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<int*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t) {
  auto* d = new MatmulDesc;
  d->compute = compute;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<MatmulDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buffer, size_t bytes) {
  auto* d = reinterpret_cast<MatmulDesc*>(desc);
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (attribute == CUBLASLT_MATMUL_DESC_TRANSA) {
    std::memcpy(&d->trans_a, buffer, bytes);
  } else if (attribute == CUBLASLT_MATMUL_DESC_TRANSB) {
    std::memcpy(&d->trans_b, buffer, bytes);
  } else {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < static_cast<int64_t>(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new MatrixLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<MatrixLayout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  *preference = reinterpret_cast<cublasLtMatmulPreference_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete reinterpret_cast<int*>(preference);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int,
                                              cublasLtMatmulHeuristicResult_t* result, int* count) {
  std::memset(result, 0, sizeof(*result));
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}
// D = alpha · op(A) · op(B) + beta · C, column-major, accumulated in fp32 like
// CUBLAS_COMPUTE_32F (sequential FMAs over k).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_layout, const void* b,
                              cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t*, void*,
                              size_t, cudaStream_t stream) {
  const MatmulDesc op = *reinterpret_cast<MatmulDesc*>(desc);
  const MatrixLayout la = *reinterpret_cast<MatrixLayout*>(a_layout);
  const MatrixLayout lb = *reinterpret_cast<MatrixLayout*>(b_layout);
  const MatrixLayout lc = *reinterpret_cast<MatrixLayout*>(c_layout);
  const MatrixLayout ld = *reinterpret_cast<MatrixLayout*>(d_layout);
  const float scale = *static_cast<const float*>(alpha);
  const float keep = *static_cast<const float*>(beta);
  if (op.compute != CUBLAS_COMPUTE_32F || lc.type != CUDA_R_32F || ld.type != CUDA_R_32F ||
      la.type != lb.type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = op.trans_a == CUBLAS_OP_T;
  const bool tb = op.trans_b == CUBLAS_OP_T;
  const uint64_t m = ta ? la.cols : la.rows;
  const uint64_t k = ta ? la.rows : la.cols;
  const uint64_t n = tb ? lb.rows : lb.cols;
  if ((tb ? lb.cols : lb.rows) != k || ld.rows != m || ld.cols != n || lc.rows != m ||
      lc.cols != n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  emu::Enqueue(stream, [=] {
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (uint64_t p = 0; p < k; ++p) {
          const float av = Load(la.type, a, ta ? p + i * la.ld : i + p * la.ld);
          const float bv = Load(lb.type, b, tb ? j + p * lb.ld : p + j * lb.ld);
          acc = std::fma(av, bv, acc);
        }
        const float prior = keep != 0.0f ? static_cast<const float*>(c)[i + j * lc.ld] : 0.0f;
        static_cast<float*>(d)[i + j * ld.ld] = scale * acc + keep * prior;
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
