// Tensor and LayerWeights: one layer's weights, converted to fp32 on the host, by name.
// Layouts follow PyTorch's nn.Linear: a projection weight is [out_features, in_features]. Which
// tensors a layer holds, their names in model.safetensors and their shapes are declared by the
// layer's component kinds (model/layers/component_kind.h), nowhere else.
#ifndef LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_
#define LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
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

// One layer's tensors, by their names under "layers.{i}." as the layer's kinds declare them
// (component_kind.h): the norms' under "ln1." and "ln2." ("ln1.weight"), the mixer's and the
// MLP's under their own ("attn.q_proj.weight", "ffn.fc1.bias"). A tensor the config turns off
// (a bias) is absent. Each kind's implementation reads the names its declaration lists.
struct LayerWeights {
  std::map<std::string, Tensor, std::less<>> tensors;

  // The tensor named `name`, which the layer's kinds declare for this config: a miss is a bug
  // (the weights were validated against those declarations), so it aborts naming the tensor.
  const Tensor& At(std::string_view name) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      std::fprintf(stderr, "LayerWeights: no tensor \"%.*s\"\n", static_cast<int>(name.size()),
                   name.data());
      std::abort();
    }
    return it->second;
  }
  // The tensor named `name`, or null when the layer holds none (a bias the config turns off).
  const Tensor* Find(std::string_view name) const {
    const auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  // The tensor named `name`, or an empty one (no shape, no data) when the layer holds none.
  const Tensor& FindOrEmpty(std::string_view name) const {
    static const Tensor* const kEmpty = new Tensor;
    const Tensor* t = Find(name);
    return t != nullptr ? *t : *kEmpty;
  }
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_LAYER_WEIGHTS_H_
