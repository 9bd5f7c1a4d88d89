// Device side of RowMasks (row_masks.h): a row's mask and the test of one token against it.
#ifndef LINSERVE_KERNELS_CUDA_ROW_MASKS_CUH_
#define LINSERVE_KERNELS_CUDA_ROW_MASKS_CUH_

#include <cstdint>

#include "kernels/cuda/row_masks.h"

namespace linserve::cuda {

// Row `row`'s mask, or nullptr when it has none.
__device__ __forceinline__ const uint32_t* MaskOfRow(const RowMasks& masks, int row) {
  if (masks.words == nullptr) return nullptr;
  const int32_t index = masks.index[row];
  return index < 0 ? nullptr : masks.words + static_cast<int64_t>(index) * masks.mask_words;
}

// Whether `mask` (nullptr = all) allows token t.
__device__ __forceinline__ bool MaskAllows(const uint32_t* mask, int t) {
  return mask == nullptr || ((mask[t >> 5] >> (t & 31)) & 1u) != 0;
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_ROW_MASKS_CUH_
