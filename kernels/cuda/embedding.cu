// Embedding gather: one block per token row, threads striding over d_model. The row is read
// once from the (bf16/fp16/fp32) table and written once as the fp32 residual stream, plus, when
// the next GEMM reads it directly (post-norm), as a T copy, so no separate cast kernel runs.
// Slot-padded decode rows carry token 0 / position 0 and are simply computed and ignored. A
// launch-ahead decode row reads its token from the previous step's picks on the device.
// Sinusoidal positions are evaluated in double: p / 10000^(2i/d) with p in the millions loses
// the phase in fp32, and the decode latency must stay flat (and correct) at position 256k+.
// A pre-norm model's first norm runs in the same block once the row is written (add_norm.cuh,
// with AddNormKernel's block size), one launch fewer a step.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/add_norm.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

template <typename T>
__global__ void EmbedKernel(EmbedArgs args) {
  AfterPriorKernel();
  const int row = blockIdx.x;
  const int d = args.d;
  const int32_t source = args.sources == nullptr ? -1 : args.sources[row];
  const int64_t token = source >= 0 ? args.fed_tokens[source] : args.tokens[row];
  const int64_t position = args.positions[row];
  const T* table = static_cast<const T*>(args.table) + token * d;
  const T* position_row = args.position == PositionKind::kLearned
                              ? static_cast<const T*>(args.position_table) + position * d
                              : nullptr;
  float* x = args.x + static_cast<int64_t>(row) * d;
  T* x_t =
      args.x_t == nullptr ? nullptr : static_cast<T*>(args.x_t) + static_cast<int64_t>(row) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float v = ToFloat(table[c]);
    if (args.position == PositionKind::kLearned) {
      v += ToFloat(position_row[c]);
    } else if (args.position == PositionKind::kSinusoidal) {
      const int i = c / 2;
      const double angle =
          static_cast<double>(position) / pow(10000.0, (2.0 * i) / static_cast<double>(d));
      v += static_cast<float>(c % 2 == 0 ? sin(angle) : cos(angle));
    }
    x[c] = v;
    if (x_t != nullptr) x_t[c] = FromFloat<T>(v);
  }
  if (!args.normalize) return;
  __shared__ double scratch[32];
  __syncthreads();  // the whole row of x, before the norm's threads read their columns of it
  AddNormRowOfAnyWidth<T>(args.norm, row, scratch);
}

}  // namespace

absl::Status LaunchEmbed(cudaStream_t stream, const EmbedArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  const AddNormArgs& n = args.norm;
  if (args.normalize && (n.x != args.x || n.delta != nullptr || n.rows != args.rows ||
                         n.d != args.d || n.dtype != args.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchEmbed: the norm must be over the embedded rows (x, no delta, rows ", args.rows,
        ", d ", args.d, ", the table's type); got rows ", n.rows, ", d ", n.d));
  }
  const int threads = args.normalize ? kAddNormThreads : args.d >= 256 ? 256 : 128;
  return LINSERVE_DISPATCH_DTYPE(args.dtype, T, [&] {
    LaunchDependent(EmbedKernel<T>, args.rows, threads, 0, stream, args);
    return LaunchStatus("EmbedKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
