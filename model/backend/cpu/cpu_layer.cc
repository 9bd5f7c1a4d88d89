#include "model/backend/cpu/cpu_layer.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/layers/kinds.h"

namespace linserve {
namespace {

// Each kind's CPU implementation, from the list of kinds. The parser accepts only listed kinds
// and the list declares an implementation for each, so a miss is a bug, not bad input.
std::unique_ptr<CpuMixer> CreateMixer(const CpuLayerContext& context, const ComponentSpec& spec,
                                      const LayerWeights& weights, int64_t state_offset) {
#define LINSERVE_MIXER(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCpu##Name(context, spec, weights, state_offset);
#define LINSERVE_NORM(Name, file)
#define LINSERVE_MLP(Name, file)
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

std::unique_ptr<CpuNorm> CreateNorm(const CpuLayerContext& context, const ComponentSpec& spec,
                                    const Tensor& scale, const Tensor& shift) {
#define LINSERVE_MIXER(Name, file)
#define LINSERVE_NORM(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCpu##Name(context, spec, scale, shift);
#define LINSERVE_MLP(Name, file)
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

std::unique_ptr<CpuMlp> CreateMlp(const CpuLayerContext& context, const ComponentSpec& spec,
                                  const LayerWeights& weights) {
#define LINSERVE_MIXER(Name, file)
#define LINSERVE_NORM(Name, file)
#define LINSERVE_MLP(Name, file) \
  if (spec.kind == Name##Kind().name) return CreateCpu##Name(context, spec, weights);
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
  std::abort();
}

}  // namespace

void CpuWorkspace::Reserve(int index, int64_t floats) {
  if (sizes_.size() <= static_cast<size_t>(index)) sizes_.resize(static_cast<size_t>(index) + 1);
  sizes_[static_cast<size_t>(index)] = std::max(sizes_[static_cast<size_t>(index)], floats);
}

void CpuWorkspace::Allocate() {
  buffers_.clear();
  for (int64_t floats : sizes_) buffers_.emplace_back(floats);
}

cpu::WeightFormat CpuWeightFormat(WeightPrecision requested) {
  switch (CpuWeightPrecision(requested)) {
    case WeightPrecision::kBf16:
      return cpu::WeightFormat::kBf16;
    case WeightPrecision::kFp16:
      return cpu::WeightFormat::kFp16;
    case WeightPrecision::kInt8:
      return cpu::WeightFormat::kInt8;
    case WeightPrecision::kAuto:
    case WeightPrecision::kFp32:
      break;
  }
  return cpu::WeightFormat::kFp32;
}

void PassPrefillRows(const CpuPass& pass, int64_t state_offset,
                     std::vector<cpu::PrefillRows>& out) {
  out.clear();
  for (const PrefillPiece& piece : pass.pieces) {
    out.push_back({piece.first_row, piece.rows,
                   pass.states + piece.slot * pass.state_floats + state_offset});
  }
}

cpu::PackedMatrix PackWeights(const CpuLayerContext& context, const Tensor& t) {
  static_assert(cpu::PackedMatrix::kInt8Block == kInt8WeightBlock);
  const cpu::WeightFormat format = CpuWeightFormat(context.options.weight_precision);
  if (format == cpu::WeightFormat::kInt8 && !t.int8_q.empty()) {
    // Stored int8: packed as stored, never quantized again.
    return cpu::PackedMatrix::FromInt8(t.int8_q.data(), t.int8_scales.data(), t.shape[0],
                                       t.shape[1]);
  }
  return cpu::PackedMatrix::Pack(t.data.data(), t.shape[0], t.shape[1], format);
}

CpuLayers CreateCpuLayers(const CpuLayerContext& context) {
  const ModelConfig& config = context.model.config;
  const ModelWeights& w = context.model.weights;
  const std::vector<LayerSpec> specs = config.LayerList();
  const std::vector<int64_t> offsets = config.StateOffsets();
  CpuLayers out;
  out.layers.reserve(specs.size());
  for (size_t l = 0; l < specs.size(); ++l) {
    const LayerSpec& spec = specs[l];
    const LayerWeights& lw = w.layers[l];
    const bool has_mlp = FindMlpKind(spec.mlp.kind)->present;  // "none": neither MLP nor norm2
    out.layers.push_back(CpuLayer{
        .norm1 = CreateNorm(context, spec.norm, lw.At("ln1.weight"), lw.FindOrEmpty("ln1.bias")),
        .norm2 = has_mlp ? CreateNorm(context, spec.norm, lw.At("ln2.weight"),
                                      lw.FindOrEmpty("ln2.bias"))
                         : nullptr,
        .mixer = CreateMixer(context, spec.mixer, lw, offsets[l]),
        .mlp = CreateMlp(context, spec.mlp, lw)});
  }
  if (config.norm == NormPlacement::kPre) {
    out.final_norm =
        CreateNorm(context, config.FinalNorm(), w.final_norm_weight, w.final_norm_bias);
  }
  return out;
}

}  // namespace linserve
