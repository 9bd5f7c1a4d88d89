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

// Calls fn(spec, tensor, required) for every field of `weights`, those `config` leaves absent
// included (required == false, spec.shape empty; spec.name then names the field), in the order
// of the file: embeddings, each layer (its norm1, mixer, norm2, MLP), the final norm and the
// head. W is ModelWeights or const ModelWeights; the caller guarantees
// weights.layers.size() == config.n_layers.
template <typename W, typename Fn>
void VisitFields(const ModelConfig& c, W& w, Fn&& fn) {
  const int64_t d = c.d_model;
  const int64_t vocab = c.vocab_size;
  auto visit = [&fn](std::string name, bool required, std::vector<int64_t> shape, auto& tensor) {
    fn(TensorSpec{std::move(name), required ? std::move(shape) : std::vector<int64_t>{}}, tensor,
       required);
  };
  // A norm's tensors under `prefix`, into its scale and shift fields.
  auto visit_norm = [&](const std::string& prefix, const ComponentSpec& norm, bool used,
                        auto& scale, auto& shift) {
    bool scale_used = false;
    bool shift_used = false;
    if (used) {
      for (const NormTensorDecl& t : FindNormKind(norm.kind)->tensors(norm.params, d)) {
        const bool is_scale = t.role == NormTensorDecl::Role::kScale;
        (is_scale ? scale_used : shift_used) = true;
        visit(prefix + t.name, true, t.shape, is_scale ? scale : shift);
      }
    }
    if (!scale_used) visit(prefix + "weight", false, {}, scale);
    if (!shift_used) visit(prefix + "bias", false, {}, shift);
  };
  visit("embed.weight", true, {vocab, d}, w.token_embedding);
  visit("pos_embed.weight", c.position == PositionEmbedding::kLearned, {int64_t{c.max_position}, d},
        w.position_embedding);
  const std::vector<LayerSpec> layers = c.LayerList();
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& l = w.layers[i];
    const LayerSpec& spec = layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    std::vector<TensorDecl> used = FindMixerKind(spec.mixer.kind)->tensors(spec.mixer.params, d);
    const std::vector<TensorDecl> mlp = FindMlpKind(spec.mlp.kind)->tensors(spec.mlp.params, d);
    visit_norm(p + "ln1.", spec.norm, true, l.ln1_weight, l.ln1_bias);
    for (const TensorDecl& t : used) visit(p + t.name, true, t.shape, l.*t.field);
    visit_norm(p + "ln2.", spec.norm, true, l.ln2_weight, l.ln2_bias);
    for (const TensorDecl& t : mlp) visit(p + t.name, true, t.shape, l.*t.field);
    used.insert(used.end(), mlp.begin(), mlp.end());
    for (const LayerWeightsField& field : kLayerWeightsFields) {
      const bool declared = std::any_of(used.begin(), used.end(), [&](const TensorDecl& t) {
        return t.field == field.field;
      });
      const bool norm = field.field == &LayerWeights::ln1_weight ||
                        field.field == &LayerWeights::ln1_bias ||
                        field.field == &LayerWeights::ln2_weight ||
                        field.field == &LayerWeights::ln2_bias;
      if (!declared && !norm) visit(p + std::string(field.name), false, {}, l.*field.field);
    }
  }
  visit_norm("final_norm.", c.FinalNorm(), c.norm == NormPlacement::kPre, w.final_norm_weight,
             w.final_norm_bias);
  visit("lm_head.weight", !c.tie_embeddings, {vocab, d}, w.lm_head);
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

}  // namespace

int64_t ModelWeights::ParameterCount() const {
  auto count = [](const Tensor& t) { return static_cast<int64_t>(t.data.size()); };
  int64_t n = count(token_embedding) + count(position_embedding) + count(final_norm_weight) +
              count(final_norm_bias) + count(lm_head);
  for (const LayerWeights& l : layers) {
    for (const LayerWeightsField& field : kLayerWeightsFields) n += count(l.*field.field);
  }
  return n;
}

void ForEachTensor(const ModelConfig& config, const ModelWeights& weights,
                   absl::FunctionRef<void(const TensorSpec&, const Tensor&)> fn) {
  VisitFields(config, weights, [&](const TensorSpec& spec, const Tensor& t, bool required) {
    if (required) fn(spec, t);
  });
}

void ForEachTensor(const ModelConfig& config, ModelWeights& weights,
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
  ForEachTensor(config, weights,
                [&](const TensorSpec& spec, Tensor& t) { wanted.emplace_back(spec, &t); });

  std::vector<std::string> missing, unexpected, problems;
  std::set<std::string> expected_names;
  for (const auto& [spec, tensor] : wanted) {
    expected_names.insert(spec.name);
    absl::StatusOr<const SafetensorsTensor*> found = file.Find(spec.name);
    if (!found.ok()) {
      missing.push_back(spec.name);
      continue;
    }
    const SafetensorsTensor& stored = **found;
    if (stored.dtype != Dtype::kF32 && stored.dtype != Dtype::kF16 &&
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
