#include "model/layers/layer_norm.h"

#include <vector>

namespace linserve {
namespace {

std::vector<NormTensorDecl> Tensors(const ParamValues&, int64_t d) {
  return {{"weight", {d}, NormTensorDecl::Role::kScale},
          {"bias", {d}, NormTensorDecl::Role::kShift}};
}

NormKind MakeKind() {
  NormKind k;
  k.name = "layer_norm";
  k.doc = "LayerNorm over d_model with a learned scale (weight) and shift (bias)";
  k.params = {EpsilonParam("eps", 1e-5, "added to the variance")};
  k.tensors = Tensors;
  return k;
}

}  // namespace

LayerNormParams LayerNormParams::From(const ParamValues& values) {
  return {.eps = values.Number("eps")};
}

ParamValues LayerNormParams::ToValues() const {
  ParamValues v;
  v.Set("eps", eps);
  return v;
}

const NormKind& LayerNormKind() {
  static const NormKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
