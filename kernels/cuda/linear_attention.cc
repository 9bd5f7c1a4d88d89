#include "kernels/cuda/linear_attention.h"

#include "absl/strings/str_cat.h"

namespace linserve::cuda {

absl::Status CheckAttentionShape(const AttentionShape& shape) {
  if (shape.heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attention: heads ", shape.heads, " < 1"));
  }
  if (shape.key_dim < 1 || shape.key_dim > kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("attention: key_dim ", shape.key_dim,
                                                   " outside [1, ", kMaxAttentionHeadDim, "]"));
  }
  if (shape.head_dim < 1 || shape.head_dim > kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("attention: head_dim ", shape.head_dim,
                                                   " outside [1, ", kMaxAttentionHeadDim, "]"));
  }
  if (shape.feature_dim < 1 || shape.feature_dim > kMaxAttentionFeatureDim) {
    return absl::InvalidArgumentError(absl::StrCat("attention: feature_dim ", shape.feature_dim,
                                                   " outside [1, ", kMaxAttentionFeatureDim, "]"));
  }
  switch (shape.feature_map) {
    case FeatureMapKind::kEluPlusOne:
    case FeatureMapKind::kRelu:
    case FeatureMapKind::kExp:
      if (shape.feature_dim != shape.key_dim) {
        return absl::InvalidArgumentError(
            absl::StrCat("attention: feature_dim ", shape.feature_dim, " must equal key_dim ",
                         shape.key_dim, " for an elementwise feature map"));
      }
      break;
    case FeatureMapKind::kTaylor: {
      const int64_t taylor = 1 + int64_t{shape.key_dim} + int64_t{shape.key_dim} * shape.key_dim;
      if (shape.feature_dim != taylor) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attention: feature_dim ", shape.feature_dim, " must equal 1 + key_dim + key_dim² = ",
            taylor, " for the taylor feature map (key_dim ", shape.key_dim, ")"));
      }
      break;
    }
    case FeatureMapKind::kFavorPlus:
      break;
  }
  if (shape.feature_map == FeatureMapKind::kFavorPlus && shape.favor == nullptr) {
    return absl::InvalidArgumentError("attention: favor_plus needs its projection matrix");
  }
  return absl::OkStatus();
}

int64_t QkvColumns(const AttentionShape& shape) {
  return int64_t{shape.heads} * (2 * int64_t{shape.key_dim} + shape.head_dim);
}

int64_t PrefillAttentionScratchFloats(const AttentionShape& shape, int rows, int chunk) {
  const int64_t layer_state =
      static_cast<int64_t>(shape.heads) * shape.feature_dim * (shape.head_dim + 1);
  return 2 * static_cast<int64_t>(rows) * shape.heads * shape.feature_dim +
         PrefillCarries(rows, chunk) * layer_state;
}

}  // namespace linserve::cuda
