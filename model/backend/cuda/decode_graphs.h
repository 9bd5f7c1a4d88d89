// DecodeGraphs: decode steps replayed from CUDA graphs, one per variant (what the step runs
// after the LM head: nothing, or one of DeviceSampler's sampling variants) and batch-size bucket
// (powers of two below max_batch_size, then max_batch_size). A batch is padded to its bucket
// with rows that touch no slot; a graph is captured the first time its (variant, bucket) is
// used and replayed after.
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
  // Variants are numbered [0, variants).
  DecodeGraphs(int max_batch, int variants);

  // The smallest bucket holding `rows` rows (1 <= rows <= max_batch), and its size.
  size_t BucketFor(int rows) const;
  int rows(size_t bucket) const { return buckets_[bucket]; }

  bool captured(int variant, size_t bucket) const {
    return static_cast<bool>(graphs_[Index(variant, bucket)]);
  }
  // Replays the (variant, bucket) graph on `stream`.
  absl::Status Launch(int variant, size_t bucket, cudaStream_t stream) const;
  // Waits for `stream`, then records what `enqueue` enqueues on it as the (variant, bucket)
  // graph (nothing runs). The enqueued work must be capturable: plans built, no
  // synchronisation.
  absl::Status Capture(int variant, size_t bucket, cudaStream_t stream,
                       absl::FunctionRef<absl::Status()> enqueue);

 private:
  size_t Index(int variant, size_t bucket) const {
    return static_cast<size_t>(variant) * buckets_.size() + bucket;
  }

  std::vector<int> buckets_;
  std::vector<cuda::GraphExec> graphs_;  // per (variant, bucket), empty until captured
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_DECODE_GRAPHS_H_
