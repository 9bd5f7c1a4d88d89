// Tensor and LayerWeights: one layer's weights, converted to fp32 on the host, in named fields.
// Layouts follow PyTorch's nn.Linear: a projection weight is [out_features, in_features]. Which
// fields a layer uses, their tensor names in model.safetensors and their shapes are declared by
// the layer's component kinds (model/layers/component_kind.h); the rest stay empty.
#ifndef LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_
#define LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace linserve {

// A dense fp32 tensor, row-major. An empty tensor (no shape) stands for "absent" (e.g. biases
// a config turns off).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  // A projection matrix read from a file stored int8 (config weight_format int8): its stored q
  // [out, in] row-major and scales [out, ceil(in / 32)]; `data` then holds q · scale (rounded to
  // fp32), the weights the int8 kernels compute with. Empty otherwise.
  std::vector<int8_t> int8_q;
  std::vector<float> int8_scales;
  bool empty() const { return data.empty(); }
};

// The tensor names the bundled kinds give each field are next to it ("layers.{i}." first).
struct LayerWeights {
  Tensor ln1_weight, ln1_bias;  // ln1.weight / .bias (the mixer's norm)
  Tensor q_weight, q_bias;      // attn.q_proj.weight / .bias (linear_attention)
  Tensor k_weight, k_bias;      // attn.k_proj.weight / .bias
  Tensor v_weight, v_bias;      // attn.v_proj.weight / .bias
  Tensor o_weight, o_bias;      // attn.o_proj.weight / .bias
  Tensor favor_projection;      // attn.favor_projection (feature_map favor_plus)
  Tensor ln2_weight, ln2_bias;  // ln2.weight / .bias (the MLP's norm)
  Tensor fc1_weight, fc1_bias;  // ffn.fc1.weight / .bias (ffn; mlp.fc1.* for gated_mlp)
  Tensor fc2_weight, fc2_bias;  // ffn.fc2.weight / .bias
  Tensor conv_in_weight, conv_in_bias;    // conv.in_proj.weight / .bias (short_conv)
  Tensor conv_weight, conv_bias;          // conv.weight / .bias
  Tensor conv_out_weight, conv_out_bias;  // conv.out_proj.weight / .bias
};

// The fields that are projection matrices (a Linear's weight [out, in]): what the CPU backend
// packs and a file stored int8 holds as I8.
inline constexpr std::array<Tensor LayerWeights::*, 8> kProjectionFields = {
    &LayerWeights::q_weight,  &LayerWeights::k_weight,       &LayerWeights::v_weight,
    &LayerWeights::o_weight,  &LayerWeights::fc1_weight,     &LayerWeights::fc2_weight,
    &LayerWeights::conv_in_weight, &LayerWeights::conv_out_weight};

// A field of LayerWeights and its C++ name (for messages about tensors held in memory).
struct LayerWeightsField {
  std::string_view name;
  Tensor LayerWeights::*field;
};

// Every field of LayerWeights: what a layer's kinds do not declare must stay empty.
inline constexpr std::array<LayerWeightsField, 23> kLayerWeightsFields = {{
    {"ln1_weight", &LayerWeights::ln1_weight},
    {"ln1_bias", &LayerWeights::ln1_bias},
    {"q_weight", &LayerWeights::q_weight},
    {"q_bias", &LayerWeights::q_bias},
    {"k_weight", &LayerWeights::k_weight},
    {"k_bias", &LayerWeights::k_bias},
    {"v_weight", &LayerWeights::v_weight},
    {"v_bias", &LayerWeights::v_bias},
    {"o_weight", &LayerWeights::o_weight},
    {"o_bias", &LayerWeights::o_bias},
    {"favor_projection", &LayerWeights::favor_projection},
    {"ln2_weight", &LayerWeights::ln2_weight},
    {"ln2_bias", &LayerWeights::ln2_bias},
    {"fc1_weight", &LayerWeights::fc1_weight},
    {"fc1_bias", &LayerWeights::fc1_bias},
    {"fc2_weight", &LayerWeights::fc2_weight},
    {"fc2_bias", &LayerWeights::fc2_bias},
    {"conv_in_weight", &LayerWeights::conv_in_weight},
    {"conv_in_bias", &LayerWeights::conv_in_bias},
    {"conv_weight", &LayerWeights::conv_weight},
    {"conv_bias", &LayerWeights::conv_bias},
    {"conv_out_weight", &LayerWeights::conv_out_weight},
    {"conv_out_bias", &LayerWeights::conv_out_bias},
}};

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_
