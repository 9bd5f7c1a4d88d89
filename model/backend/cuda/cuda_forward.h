// CudaForward: the network on the device for one pass of rows whose inputs (token, position,
// slot) are in the workspace's device row buffers: the embedding, every layer, and the LM head.
// GEMMs run on cuBLASLt over the whole pass with fp32 accumulation (activations are rounded to
// the weight type on the way in), everything else in kernels/cuda. It only enqueues on the
// stream it is given: the caller orders and synchronises.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_weights.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/format/config.h"

namespace linserve {

// Consecutive rows of one prefill pass: tokens of one slot, starting at a multiple of the
// chunk size from the first token of the call's item (so the attention kernel, which chunks
// from its first row, sees the chunks of the item fed alone).
struct PrefillPiece {
  int32_t slot;
  int first_row;
  int rows;
};

class CudaForward {
 public:
  // Keeps references to `config`, `weights`, `workspace` and `gemm`. `prefill_chunk` is
  // BackendOptions::prefill_chunk_size.
  CudaForward(const ModelConfig& config, cuda::DType dtype, int prefill_chunk,
              const CudaWeights& weights, const CudaWorkspace& workspace, cuda::Gemm& gemm);

  // Scratch the prefill attention of a pass of `rows` rows needs.
  static int64_t PrefillScratchFloats(const ModelConfig& config, int rows, int prefill_chunk);
  // INVALID_ARGUMENT unless every layer's attention shape is one the kernels accept.
  absl::Status CheckShapes() const;

  // Copies the pinned row inputs of `rows` rows to the device.
  absl::Status EnqueueRowInputs(cudaStream_t stream, int rows);
  // Enqueues embedding + every layer for `rows` rows. No pieces: decode (row i updates the
  // state of device_rows.slots[i], a negative slot is padding); otherwise the rows are the
  // pieces' (prefill). Leaves the LM head's input (T) in act.xt.
  absl::Status EnqueueLayers(cudaStream_t stream, int rows, absl::Span<const PrefillPiece> pieces);
  // logits[rows, vocab] = the LM head of act.xt's rows [first_row, first_row + rows).
  absl::Status EnqueueHead(cudaStream_t stream, int64_t first_row, int64_t rows, float* logits);

 private:
  cuda::AttentionShape Shape(int layer) const;
  void* RowPtr(void* base, int64_t row, int64_t width) const {
    return static_cast<char*>(base) + row * width * static_cast<int64_t>(cuda::DTypeSize(dtype_));
  }

  const ModelConfig& config_;
  const cuda::DType dtype_;
  const int prefill_chunk_;
  const int64_t state_floats_;  // per slot
  const int64_t layer_floats_;  // per layer of a slot
  const CudaWeights& weights_;
  const CudaWorkspace& ws_;
  cuda::Gemm& gemm_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_
