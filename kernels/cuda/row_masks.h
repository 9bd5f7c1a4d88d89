// A launch's token masks (structured output; model/backend/token_mask.h's format), for the rows
// that have one: the masks packed one after another, and per row the index of its mask. A
// launch with no masked row passes words = nullptr and reads nothing.
#ifndef LINSERVE_KERNELS_CUDA_ROW_MASKS_H_
#define LINSERVE_KERNELS_CUDA_ROW_MASKS_H_

#include <cstdint>

namespace linserve::cuda {

struct RowMasks {
  const uint32_t* words = nullptr;  // [masks, mask_words]; nullptr: no row is masked
  const int32_t* index = nullptr;   // [rows]: row r's mask is the index[r]-th, -1 = none
  int mask_words = 0;               // ceil(vocab / 32)
};

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_ROW_MASKS_H_
