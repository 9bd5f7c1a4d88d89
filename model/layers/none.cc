#include "model/layers/none.h"

#include <vector>

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues&, int64_t) { return {}; }

MlpKind MakeKind() {
  MlpKind k;
  k.name = "none";
  k.doc = "no MLP: the layer is its norm and mixer alone, without a second norm (Mamba's block)";
  k.tensors = Tensors;
  k.present = false;
  return k;
}

}  // namespace

const MlpKind& NoneKind() {
  static const MlpKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
