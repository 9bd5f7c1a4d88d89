// Device helpers over a pass's prefill tables (prefill_pieces.h).
#ifndef LINSERVE_KERNELS_CUDA_PREFILL_PIECES_CUH_
#define LINSERVE_KERNELS_CUDA_PREFILL_PIECES_CUH_

#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

// The index of the piece holding pass row `row` (pieces are in row order and cover the pass):
// a binary search, log2(pieces) reads.
__device__ __forceinline__ int PieceOfRow(const PrefillTables& tables, int row) {
  int lo = 0;
  int hi = tables.piece_count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tables.pieces[mid].first_row <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_PREFILL_PIECES_CUH_
