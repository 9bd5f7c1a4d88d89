// DecodeGraphs: decode steps replayed from CUDA graphs, one per batch-size bucket (powers of two
// below max_batch_size, then max_batch_size). A batch is padded to its bucket with rows that
// touch no slot; a bucket's graph is captured the first time it is used and replayed after.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_DECODE_GRAPHS_H_
#define LINSERVE_MODEL_BACKEND_CUDA_DECODE_GRAPHS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "kernels/cuda/device_memory.h"

namespace linserve {

class DecodeGraphs {
 public:
  explicit DecodeGraphs(int max_batch);

  // The smallest bucket holding `rows` rows (1 <= rows <= max_batch), and its size.
  size_t BucketFor(int rows) const;
  int rows(size_t bucket) const { return buckets_[bucket]; }

  bool captured(size_t bucket) const { return static_cast<bool>(graphs_[bucket]); }
  // Replays the bucket's captured graph on `stream`.
  absl::Status Launch(size_t bucket, cudaStream_t stream) const;
  // Waits for `stream`, then records what `enqueue` enqueues on it as the bucket's graph
  // (nothing runs). The enqueued work must be capturable: plans built, no synchronisation.
  absl::Status Capture(size_t bucket, cudaStream_t stream,
                       absl::FunctionRef<absl::Status()> enqueue);

 private:
  std::vector<int> buckets_;
  std::vector<cuda::GraphExec> graphs_;  // per bucket, empty until captured
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_DECODE_GRAPHS_H_
