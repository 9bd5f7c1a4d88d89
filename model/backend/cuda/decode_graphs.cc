#include "model/backend/cuda/decode_graphs.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace linserve {
namespace {

std::vector<int> MakeBuckets(int max_batch) {
  std::vector<int> buckets;
  for (int b = 1; b < max_batch; b *= 2) buckets.push_back(b);
  buckets.push_back(max_batch);
  return buckets;
}

}  // namespace

DecodeGraphs::DecodeGraphs(int max_batch, int variants)
    : buckets_(MakeBuckets(max_batch)),
      graphs_(static_cast<size_t>(variants) * buckets_.size()) {}

size_t DecodeGraphs::BucketFor(int rows) const {
  return static_cast<size_t>(std::lower_bound(buckets_.begin(), buckets_.end(), rows) -
                             buckets_.begin());
}

absl::Status DecodeGraphs::Launch(int variant, size_t bucket, cudaStream_t stream) const {
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[Index(variant, bucket)].get(), stream));
  return absl::OkStatus();
}

absl::Status DecodeGraphs::Capture(int variant, size_t bucket, cudaStream_t stream,
                                   absl::FunctionRef<absl::Status()> enqueue) {
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!enqueued.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return enqueued;
  }
  LINSERVE_CUDA_RETURN_IF_ERROR(ended);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  LINSERVE_CUDA_RETURN_IF_ERROR(instantiated);
  graphs_[Index(variant, bucket)] = cuda::GraphExec(exec);
  return absl::OkStatus();
}

}  // namespace linserve
