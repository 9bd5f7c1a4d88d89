// CudaForward: the network on the device for one pass of rows whose inputs (token, position,
// slot) are in the workspace's device row buffers: the embedding, the layer list
// (cuda_layer.h) and the LM head. GEMMs run on cuBLASLt over the whole pass with fp32
// accumulation (activations are rounded to the weight type on the way in), everything else in
// kernels/cuda. It only enqueues on the stream it is given: the caller orders and synchronises.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/gemm.h"
#include "model/backend/cuda/cuda_layer.h"
#include "model/backend/cuda/cuda_weights.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/format/config.h"

namespace linserve {

class CudaForward {
 public:
  // Keeps references to `config`, `weights`, `workspace` and `gemm`; `layers` were made with
  // the same weights and gemm, and their scratch is in `workspace`.
  CudaForward(const ModelConfig& config, cuda::DType dtype, const CudaWeights& weights,
              const CudaWorkspace& workspace, cuda::Gemm& gemm, CudaLayers layers);

  // INVALID_ARGUMENT unless the kernels can run every layer.
  absl::Status Check() const;
  // After Check, once: enqueues on `stream` what the layers derive from their shapes
  // (CudaMixer::Prepare).
  absl::Status Prepare(cudaStream_t stream);

  // Copies the pinned row inputs `host` of `rows` rows to the device, with their sources for a
  // decode step (`decode`; see EnqueueLayers).
  absl::Status EnqueueRowInputs(cudaStream_t stream, int rows, const RowInputs& host, bool decode);
  // Enqueues embedding + every layer for `rows` rows. No prefill tables: decode (row i updates
  // the state of device_rows.slots[i], a negative slot is padding, and a row whose source is
  // >= 0 feeds decode_picks[source], the previous decode step's pick); otherwise the rows are
  // the pieces of `prefill` (device tables). Leaves the LM head's input (T) in act.xt.
  absl::Status EnqueueLayers(cudaStream_t stream, int rows,
                             const cuda::PrefillTables* prefill);
  // logits[rows, padded vocab] = the LM head of act.xt's rows [first_row, first_row + rows); row
  // r starts at logits + r · act.logits_stride, its first vocab_size columns the real logits.
  absl::Status EnqueueHead(cudaStream_t stream, int64_t first_row, int64_t rows, float* logits);
  // Copies the first `rows` rows of act.logits, their vocab_size real columns only, to `host`
  // ([rows, vocab_size], dense).
  absl::Status EnqueueLogitsToHost(cudaStream_t stream, int64_t rows, float* host);

 private:
  const ModelConfig& config_;
  const cuda::DType dtype_;
  const int64_t state_floats_;  // per slot
  const CudaWeights& weights_;
  const CudaWorkspace& ws_;
  cuda::Gemm& gemm_;
  CudaLayers layers_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_FORWARD_H_
