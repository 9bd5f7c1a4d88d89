#include "model/layers/rms_norm.h"

#include <vector>

namespace linserve {
namespace {

std::vector<NormTensorDecl> Tensors(const ParamValues&, int64_t d) {
  return {{"weight", {d}, NormTensorDecl::Role::kScale}};
}

NormKind MakeKind() {
  NormKind k;
  k.name = "rms_norm";
  k.doc = "RMSNorm over d_model with a learned scale (weight) and no shift";
  k.params = {EpsilonParam("eps", 1e-5, "added to the mean of the squares")};
  k.tensors = Tensors;
  return k;
}

}  // namespace

RmsNormParams RmsNormParams::From(const ParamValues& values) {
  return {.eps = values.Number("eps")};
}

ParamValues RmsNormParams::ToValues() const {
  ParamValues v;
  v.Set("eps", eps);
  return v;
}

const NormKind& RmsNormKind() {
  static const NormKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
