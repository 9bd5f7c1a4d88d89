#include "model/backend/cuda/cuda_layer.h"

#include <cstdlib>
#include <utility>
#include <vector>

#include "model/layers/kinds.h"

namespace linserve {
namespace {

// Each kind's CUDA implementation, from the list of kinds. Every listed kind has one (the list
// declares it; CudaBackendTest.ModelVariantsUseEveryLayerKind and the parity tests over those
// variants run them all), so a miss is a bug, not bad input.
std::unique_ptr<CudaMixer> CreateMixer(const CudaLayerContext& context, const ComponentSpec& spec,
                                       const CudaLayerWeights& weights, int64_t state_offset) {
#define LINSERVE_MIXER(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCuda##Name(context, spec, weights, state_offset);
#define LINSERVE_NORM(Name, file)
#define LINSERVE_MLP(Name, file)
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

std::unique_ptr<CudaNorm> CreateNorm(const CudaLayerContext& context, const ComponentSpec& spec,
                                     const float* scale, const float* shift) {
#define LINSERVE_MIXER(Name, file)
#define LINSERVE_NORM(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCuda##Name(context, spec, scale, shift);
#define LINSERVE_MLP(Name, file)
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

std::unique_ptr<CudaMlp> CreateMlp(const CudaLayerContext& context, const ComponentSpec& spec,
                                   const CudaLayerWeights& weights) {
#define LINSERVE_MIXER(Name, file)
#define LINSERVE_NORM(Name, file)
#define LINSERVE_MLP(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCuda##Name(context, spec, weights);
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

}  // namespace

std::vector<CudaTensorGroup> CudaTensorGroups(const LayerSpec& spec) {
  std::vector<CudaTensorGroup> groups;
  const int64_t any_width = 1;  // the names do not depend on the width
  const bool has_mlp = FindMlpKind(spec.mlp.kind)->present;  // "none": no ln2.*
  for (const char* prefix : {"ln1.", "ln2."}) {
    if (!has_mlp && std::string_view(prefix) == "ln2.") continue;
    for (const NormTensorDecl& t :
         FindNormKind(spec.norm.kind)->tensors(spec.norm.params, any_width)) {
      groups.push_back({prefix + t.name, {prefix + t.name}, /*matrix=*/false});
    }
  }
  auto add = [&](std::vector<CudaTensorGroup> more) {
    for (CudaTensorGroup& g : more) groups.push_back(std::move(g));
  };
#define LINSERVE_MIXER(Name, file) \
  if (spec.mixer.kind == Name##Kind().name) add(CudaTensorsOf##Name(spec.mixer));
#define LINSERVE_NORM(Name, file)
#define LINSERVE_MLP(Name, file) \
  if (spec.mlp.kind == Name##Kind().name) add(CudaTensorsOf##Name(spec.mlp));
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  return groups;
}

cuda::AddNormArgs ResidualNormArgs(const Activations& act, int rows, bool pre, int d_model,
                                   cuda::DType dtype) {
  cuda::AddNormArgs a;
  a.x = act.x;
  a.y_t = act.xt;
  a.rows = rows;
  a.d = d_model;
  a.dtype = dtype;
  if (pre) {
    a.sum_out = act.x;  // x += delta; the normalised copy only feeds the next GEMM
  } else {
    a.y = act.x;  // x = norm(x + delta)
  }
  return a;
}

CudaLayers CreateCudaLayers(const CudaLayerContext& context, const CudaWeights& weights) {
  const ModelConfig& config = context.model.config;
  const std::vector<LayerSpec> specs = config.LayerList();
  const std::vector<int64_t> offsets = config.StateOffsets();
  CudaLayers out;
  out.layers.reserve(specs.size());
  for (size_t l = 0; l < specs.size(); ++l) {
    const LayerSpec& spec = specs[l];
    const CudaLayerWeights& lw = weights.layers[l];
    const bool has_mlp = FindMlpKind(spec.mlp.kind)->present;  // "none": neither MLP nor norm2
    out.layers.push_back(CudaLayer{
        .norm1 =
            CreateNorm(context, spec.norm, lw.RequiredVector("ln1.weight"), lw.Vector("ln1.bias")),
        .norm2 = has_mlp ? CreateNorm(context, spec.norm, lw.RequiredVector("ln2.weight"),
                                      lw.Vector("ln2.bias"))
                         : nullptr,
        .mixer = CreateMixer(context, spec.mixer, lw, offsets[l]),
        .mlp = CreateMlp(context, spec.mlp, lw)});
  }
  if (config.norm == NormPlacement::kPre) {
    out.final_norm =
        CreateNorm(context, config.FinalNorm(), weights.final_norm_weight, weights.final_norm_bias);
  }
  return out;
}

}  // namespace linserve
