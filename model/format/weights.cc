#include "model/format/weights.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/format/file_io.h"
#include "model/layers/kinds.h"

namespace linserve {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A layer's tensors as its kinds declare them, in the file's order (its norm1, mixer, norm2,
// MLP), named under "layers.{i}.".
std::vector<TensorDecl> LayerTensors(const LayerSpec& spec, int64_t d) {
  std::vector<TensorDecl> out;
  const NormKind& norm = *FindNormKind(spec.norm.kind);
  auto add_norm = [&](const std::string& prefix) {
    for (const NormTensorDecl& t : norm.tensors(spec.norm.params, d)) {
      out.push_back({prefix + t.name, t.shape});
    }
  };
  add_norm("ln1.");
  for (TensorDecl& t : FindMixerKind(spec.mixer.kind)->tensors(spec.mixer.params, d)) {
    out.push_back(std::move(t));
  }
  const MlpKind& mlp = *FindMlpKind(spec.mlp.kind);
  if (mlp.present) add_norm("ln2.");  // "none": no MLP, no second norm
  for (TensorDecl& t : mlp.tensors(spec.mlp.params, d)) {
    out.push_back(std::move(t));
  }
  return out;
}

// The tensor named `name` of a layer: added when filling one, an empty one when reading a
// layer that lacks it (validation then reports its shape).
Tensor& LayerTensor(LayerWeights& layer, const std::string& name) { return layer.tensors[name]; }
const Tensor& LayerTensor(const LayerWeights& layer, const std::string& name) {
  return layer.FindOrEmpty(name);
}

// Calls fn(spec, tensor, required) for every tensor `config` requires and for the model-level
// fields it leaves absent (required == false, spec.shape empty; spec.name then names the field),
// in the order of the file: embeddings, each layer (its norm1, mixer, norm2, MLP), the final
// norm and the head. A layer's tensors are those its kinds declare (a layer holding others is
// ValidateWeights' to refuse). W is ModelWeights or const ModelWeights; the caller guarantees
// weights.layers.size() == config.n_layers.
template <typename W, typename Fn>
void VisitFields(const ModelConfig& c, W& w, Fn&& fn) {
  const int64_t d = c.d_model;
  const int64_t vocab = c.vocab_size;
  auto visit = [&fn](std::string name, bool required, std::vector<int64_t> shape, auto& tensor,
                     bool projection = false) {
    fn(TensorSpec{std::move(name), required ? std::move(shape) : std::vector<int64_t>{},
                  projection},
       tensor, required);
  };
  // The final norm's tensors, into its scale and shift fields.
  auto visit_final_norm = [&](const ComponentSpec& norm, bool used, auto& scale, auto& shift) {
    bool scale_used = false;
    bool shift_used = false;
    if (used) {
      for (const NormTensorDecl& t : FindNormKind(norm.kind)->tensors(norm.params, d)) {
        const bool is_scale = t.role == NormTensorDecl::Role::kScale;
        (is_scale ? scale_used : shift_used) = true;
        visit("final_norm." + t.name, true, t.shape, is_scale ? scale : shift);
      }
    }
    if (!scale_used) visit("final_norm.weight", false, {}, scale);
    if (!shift_used) visit("final_norm.bias", false, {}, shift);
  };
  visit("embed.weight", true, {vocab, d}, w.token_embedding);
  visit("pos_embed.weight", c.position == PositionEmbedding::kLearned, {int64_t{c.max_position}, d},
        w.position_embedding);
  const std::vector<LayerSpec> layers = c.LayerList();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    for (const TensorDecl& t : LayerTensors(layers[i], d)) {
      visit(p + t.name, true, t.shape, LayerTensor(w.layers[i], t.name), t.projection);
    }
  }
  visit_final_norm(c.FinalNorm(), c.norm == NormPlacement::kPre, w.final_norm_weight,
                   w.final_norm_bias);
  visit("lm_head.weight", !c.tie_embeddings, {vocab, d}, w.lm_head, true);
}

// "a, b, c (and 7 more)": long lists of tensor names stay readable.
std::string NameList(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) {
    quoted.push_back(absl::StrCat("\"", names[i], "\""));
  }
  std::string text = absl::StrJoin(quoted, ", ");
  if (names.size() > kShown) absl::StrAppend(&text, " (and ", names.size() - kShown, " more)");
  return text;
}

// INVALID_ARGUMENT naming the first non-finite element of `data`, or OK.
absl::Status CheckFinite(const std::string& source, const std::string& name,
                         const std::vector<float>& data) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data[i])) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": tensor \"", name, "\" element ", i,
                                                     " is ", data[i], "; weights must be finite"));
    }
  }
  return absl::OkStatus();
}

// The first problem with an int8-stored projection `spec` (stored as `q_stored`), or "": the
// dtypes and shapes of the tensor and of its scales.
std::string Int8ProjectionProblem(const SafetensorsFile& file, const TensorSpec& spec,
                                  const SafetensorsTensor& q_stored) {
  const std::string scales_name = Int8ScalesName(spec.name);
  const int64_t out = spec.shape[0];
  const int64_t blocks = (spec.shape[1] + kInt8WeightBlock - 1) / kInt8WeightBlock;
  const std::vector<int64_t> scales_shape = {out, blocks};
  if (q_stored.dtype != Dtype::kI8) {
    return absl::StrCat("tensor \"", spec.name, "\" has dtype ", DtypeName(q_stored.dtype).data(),
                        "; config.json's weight_format int8 stores every projection matrix as I8");
  }
  if (q_stored.shape != spec.shape) {
    return absl::StrCat("tensor \"", spec.name, "\" has shape ", ShapeText(q_stored.shape),
                        ", expected ", ShapeText(spec.shape));
  }
  absl::StatusOr<const SafetensorsTensor*> scales = file.Find(scales_name);
  if (!scales.ok()) {
    return absl::StrCat("tensor \"", spec.name, "\" is I8 but its scales tensor \"", scales_name,
                        "\" is missing (F32 ", ShapeText(scales_shape), ": one scale per block of ",
                        kInt8WeightBlock, " inputs)");
  }
  if ((*scales)->dtype != Dtype::kF32) {
    return absl::StrCat("tensor \"", scales_name, "\" has dtype ",
                        DtypeName((*scales)->dtype).data(), "; int8 scales must be F32");
  }
  if ((*scales)->shape != scales_shape) {
    return absl::StrCat("tensor \"", scales_name, "\" has shape ", ShapeText((*scales)->shape),
                        ", expected ", ShapeText(scales_shape), " (one scale per block of ",
                        kInt8WeightBlock, " of the ", spec.shape[1], " inputs, for each of the ",
                        out, " outputs)");
  }
  return "";
}

// Reads an int8-stored projection that Int8ProjectionProblem accepted into `t`: q, the scales
// (finite and non-negative) and data = q · scale.
absl::Status ReadInt8Projection(const SafetensorsFile& file, const TensorSpec& spec, Tensor& t) {
  const std::string scales_name = Int8ScalesName(spec.name);
  absl::StatusOr<std::vector<int64_t>> q = file.ReadInt64(spec.name);
  if (!q.ok()) return q.status();
  absl::StatusOr<std::vector<float>> scales = file.ReadFloat32(scales_name);
  if (!scales.ok()) return scales.status();
  for (size_t i = 0; i < scales->size(); ++i) {
    const float s = (*scales)[i];
    if (!std::isfinite(s) || s < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.source(), ": tensor \"", scales_name, "\" element ", i, " is ", s,
          "; int8 scales must be finite and non-negative"));
    }
  }
  const int64_t in = spec.shape[1];
  const int64_t blocks = (in + kInt8WeightBlock - 1) / kInt8WeightBlock;
  t.int8_q.resize(q->size());
  t.data.resize(q->size());
  for (size_t i = 0; i < q->size(); ++i) {
    const int64_t v = (*q)[i];
    if (v < -127 || v > 127) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.source(), ": tensor \"", spec.name, "\" element ", i, " is ", v,
                       "; int8 weights must be in [-127, 127]"));
    }
    const int64_t row = static_cast<int64_t>(i) / in;
    const int64_t block = static_cast<int64_t>(i) % in / kInt8WeightBlock;
    t.int8_q[i] = static_cast<int8_t>(v);
    // As PackedMatrix::Dequantize computes it: the weight the int8 kernels use.
    const float scale = (*scales)[static_cast<size_t>(row * blocks + block)];
    t.data[i] = static_cast<float>(t.int8_q[i]) * scale;
  }
  t.int8_scales = *std::move(scales);
  t.shape = spec.shape;
  return CheckFinite(file.source(), spec.name, t.data);
}

}  // namespace

std::string Int8ScalesName(const std::string& name) { return name + ".scales"; }

int64_t ModelWeights::ParameterCount() const {
  auto count = [](const Tensor& t) { return static_cast<int64_t>(t.data.size()); };
  int64_t n = count(token_embedding) + count(position_embedding) + count(final_norm_weight) +
              count(final_norm_bias) + count(lm_head);
  for (const LayerWeights& l : layers) {
    for (const auto& [name, t] : l.tensors) n += count(t);
  }
  return n;
}

void ForEachTensor(const ModelConfig& config, const ModelWeights& weights,
                   absl::FunctionRef<void(const TensorSpec&, const Tensor&)> fn) {
  VisitFields(config, weights, [&](const TensorSpec& spec, const Tensor& t, bool required) {
    if (required) fn(spec, t);
  });
}

void ForEachTensorToFill(const ModelConfig& config, ModelWeights& weights,
                         absl::FunctionRef<void(const TensorSpec&, Tensor&)> fn) {
  weights.layers.resize(static_cast<size_t>(config.n_layers));
  VisitFields(config, weights, [&](const TensorSpec& spec, Tensor& t, bool required) {
    if (required) fn(spec, t);
  });
}

absl::Status ValidateWeights(const ModelConfig& config, const ModelWeights& weights) {
  if (weights.layers.size() != static_cast<size_t>(config.n_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights have ", weights.layers.size(), " layers; config n_layers is ", config.n_layers));
  }
  const std::vector<LayerSpec> layers = config.LayerList();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<TensorDecl> declared = LayerTensors(layers[i], config.d_model);
    for (const auto& entry : weights.layers[i].tensors) {
      const std::string& name = entry.first;
      if (std::none_of(declared.begin(), declared.end(),
                       [&](const TensorDecl& decl) { return decl.name == name; })) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"layers.", i, ".", name,
                                                       "\" is present but the config has no "
                                                       "such tensor"));
      }
    }
  }
  absl::Status status;
  VisitFields(config, weights, [&](const TensorSpec& spec, const Tensor& t, bool required) {
    if (!status.ok()) return;
    if (!required) {
      if (!t.empty() || !t.shape.empty()) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "tensor \"", spec.name, "\" is present but the config has no such tensor"));
      }
      return;
    }
    if (t.shape != spec.shape) {
      status = absl::InvalidArgumentError(absl::StrCat("tensor \"", spec.name, "\" has shape ",
                                                       ShapeText(t.shape), ", expected ",
                                                       ShapeText(spec.shape)));
      return;
    }
    if (static_cast<int64_t>(t.data.size()) != Product(spec.shape)) {
      status = absl::InvalidArgumentError(
          absl::StrCat("tensor \"", spec.name, "\" has ", t.data.size(), " values; shape ",
                       ShapeText(spec.shape), " needs ", Product(spec.shape)));
      return;
    }
    status = CheckFinite("weights", spec.name, t.data);
  });
  return status;
}

absl::StatusOr<ModelWeights> ReadModelWeights(const ModelConfig& config,
                                              const SafetensorsFile& file) {
  ModelWeights weights;
  std::vector<std::pair<TensorSpec, Tensor*>> wanted;
  ForEachTensorToFill(config, weights,
                      [&](const TensorSpec& spec, Tensor& t) { wanted.emplace_back(spec, &t); });

  const bool int8 = config.weight_format == WeightFileFormat::kInt8;
  std::vector<std::string> missing, unexpected, problems;
  std::set<std::string> expected_names;
  for (const auto& [spec, tensor] : wanted) {
    expected_names.insert(spec.name);
    if (int8 && spec.projection) expected_names.insert(Int8ScalesName(spec.name));
    absl::StatusOr<const SafetensorsTensor*> found = file.Find(spec.name);
    if (!found.ok()) {
      missing.push_back(spec.name);
      continue;
    }
    const SafetensorsTensor& stored = **found;
    if (int8 && spec.projection) {
      if (std::string problem = Int8ProjectionProblem(file, spec, stored); !problem.empty()) {
        problems.push_back(std::move(problem));
      }
    } else if (stored.dtype == Dtype::kI8) {
      problems.push_back(absl::StrCat(
          "tensor \"", spec.name, "\" has dtype I8 but config.json declares no weight_format "
          "int8", spec.projection ? "" : " (and only projection matrices may be I8)"));
    } else if (stored.dtype != Dtype::kF32 && stored.dtype != Dtype::kF16 &&
               stored.dtype != Dtype::kBF16) {
      problems.push_back(absl::StrCat("tensor \"", spec.name, "\" has dtype ",
                                      DtypeName(stored.dtype).data(),
                                      "; weights must be F32, F16 or BF16"));
    } else if (stored.shape != spec.shape) {
      problems.push_back(absl::StrCat("tensor \"", spec.name, "\" has shape ",
                                      ShapeText(stored.shape), ", expected ",
                                      ShapeText(spec.shape)));
    }
  }
  for (const SafetensorsTensor& stored : file.tensors()) {
    if (expected_names.count(stored.name) == 0) unexpected.push_back(stored.name);
  }
  if (!missing.empty()) {
    problems.insert(problems.begin(),
                    absl::StrCat("missing ", missing.size(), " tensor",
                                 missing.size() > 1 ? "s " : " ", NameList(missing)));
  }
  if (!unexpected.empty()) {
    problems.push_back(absl::StrCat(unexpected.size(), " unexpected tensor",
                                    unexpected.size() > 1 ? "s " : " ", NameList(unexpected),
                                    " (not used by this config)"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.source(), ": ", absl::StrJoin(problems, "; ")));
  }

  for (const auto& [spec, tensor] : wanted) {
    if (int8 && spec.projection) {
      if (absl::Status s = ReadInt8Projection(file, spec, *tensor); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<std::vector<float>> data = file.ReadFloat32(spec.name);
    if (!data.ok()) return data.status();
    if (absl::Status s = CheckFinite(file.source(), spec.name, *data); !s.ok()) return s;
    tensor->shape = spec.shape;
    tensor->data = *std::move(data);
  }
  return weights;
}

absl::StatusOr<std::string> SerializeModelWeights(const ModelConfig& config,
                                                  const ModelWeights& weights, Dtype dtype) {
  if (dtype != Dtype::kF32 && dtype != Dtype::kF16 && dtype != Dtype::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight dtype ", DtypeName(dtype).data(), " is not one of F32, F16, BF16"));
  }
  if (config.weight_format != WeightFileFormat::kFloat) {
    return absl::InvalidArgumentError(
        "config weight_format int8: this writer stores float weights only (the int8 file "
        "format is written by reference/quantize_weights.py)");
  }
  if (absl::Status s = ValidateWeights(config, weights); !s.ok()) return s;
  std::vector<SafetensorsWriteTensor> tensors;
  ForEachTensor(config, weights, [&](const TensorSpec& spec, const Tensor& t) {
    tensors.push_back({spec.name, dtype, spec.shape, t.data, {}});
  });
  return SerializeSafetensors(tensors, {{"format", "pt"}});
}

absl::Status WriteModelWeights(const ModelConfig& config, const ModelWeights& weights,
                               const std::string& path, Dtype dtype) {
  absl::StatusOr<std::string> bytes = SerializeModelWeights(config, weights, dtype);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(path, *bytes);
}

}  // namespace linserve
