#include "model/backend/cuda/cuda_weights.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "model/backend/cuda/buffer_layout.h"
#include "model/backend/cuda/padded_vocab.h"

namespace linserve {

using cuda::DeviceBuffer;
using cuda::DType;

DType WeightDType(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kFp16:
      return DType::kF16;
    case WeightPrecision::kFp32:
      return DType::kF32;
    case WeightPrecision::kAuto:
    case WeightPrecision::kBf16:
    case WeightPrecision::kInt8:  // never here: CreateCudaBackend refuses it (CudaWeightPrecision)
      break;
  }
  return DType::kBf16;
}

const void* CudaLayerWeights::Matrix(std::string_view name) const {
  const auto it = groups.find(name);
  if (it == groups.end()) {
    std::fprintf(stderr, "CudaLayerWeights: no device tensor \"%.*s\"\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return it->second;
}

const float* CudaLayerWeights::RequiredVector(std::string_view name) const {
  return static_cast<const float*>(Matrix(name));
}

const float* CudaLayerWeights::Vector(std::string_view name) const {
  const auto it = groups.find(name);
  return it == groups.end() ? nullptr : static_cast<const float*>(it->second);
}

absl::StatusOr<CudaWeights> UploadWeights(const Model& model, DType dtype, cudaStream_t stream) {
  const ModelConfig& config = model.config;
  const ModelWeights& w = model.weights;
  const size_t element = cuda::DTypeSize(dtype);
  BufferLayout layout;
  // Offsets of every tensor in the one weights allocation, recorded in upload order.
  struct Upload {
    const Tensor* tensor;
    size_t offset;
    bool convert;  // stored in dtype (matrices) or kept fp32 (vectors, favor projections)
    size_t zero_bytes = 0;  // zeroed after the tensor: the pad rows of a vocabulary matrix
  };
  std::vector<Upload> uploads;
  constexpr size_t kAbsent = static_cast<size_t>(-1);
  auto add = [&](const Tensor& t, bool convert) -> size_t {
    const size_t offset = layout.Reserve(t.data.size() * (convert ? element : sizeof(float)));
    uploads.push_back({&t, offset, convert});
    return offset;
  };
  // A [vocab, d] matrix (embedding, LM head) stored with PaddedVocab(vocab) rows, the pad rows
  // zero, so that the head's logits have an aligned row stride (padded_vocab.h).
  const int64_t vocab = config.vocab_size;
  const int64_t padded_vocab = PaddedVocab(vocab);
  auto add_vocab_rows = [&](const Tensor& t) -> size_t {
    const size_t row_bytes = static_cast<size_t>(config.d_model) * element;
    const size_t offset = layout.Reserve(static_cast<size_t>(padded_vocab) * row_bytes);
    uploads.push_back(
        {&t, offset, true, static_cast<size_t>(padded_vocab - vocab) * row_bytes});
    return offset;
  };
  // Which tensors a model has is declared by its kinds (model/layers/); the rest are absent.
  auto optional = [&](const Tensor& t, bool convert) {
    return t.empty() ? kAbsent : add(t, convert);
  };
  const size_t embedding = add_vocab_rows(w.token_embedding);
  const size_t position =
      config.position == PositionEmbedding::kLearned ? add(w.position_embedding, true) : kAbsent;
  // Per layer, each present group's offset: its tensors one after another.
  const std::vector<LayerSpec> specs = config.LayerList();
  std::vector<std::map<std::string, size_t>> offsets(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    // Every tensor of the layer in exactly one group, every group name once: a kind whose
    // CudaTensorsOf left a tensor out, or two kinds naming a group alike, is a bug.
    std::map<std::string, std::string> group_of;  // tensor → its group
    for (const CudaTensorGroup& group : CudaTensorGroups(specs[i])) {
      if (offsets[i].contains(group.name) ||
          std::any_of(group_of.begin(), group_of.end(),
                      [&](const auto& entry) { return entry.second == group.name; })) {
        return absl::InternalError(
            absl::StrCat("layer ", i, ": two device groups are named \"", group.name, "\""));
      }
      std::vector<const Tensor*> parts;
      std::vector<std::string> missing;
      size_t bytes = 0;
      const size_t unit = group.matrix ? element : sizeof(float);
      for (const std::string& name : group.tensors) {
        if (!group_of.emplace(name, group.name).second) {
          return absl::InternalError(absl::StrCat("layer ", i, ": tensor \"", name,
                                                  "\" is in device groups \"", group_of[name],
                                                  "\" and \"", group.name, "\""));
        }
        if (const Tensor* t = l.Find(name)) {
          parts.push_back(t);
          bytes += t->data.size() * unit;
        } else {
          missing.push_back(name);
        }
      }
      if (parts.empty()) continue;
      if (!missing.empty()) {
        return absl::InternalError(absl::StrCat("layer ", i, " lacks \"", missing[0],
                                                "\" of its device group \"", group.name,
                                                "\" but holds others of it"));
      }
      size_t offset = layout.Reserve(bytes);
      offsets[i][group.name] = offset;
      for (const Tensor* t : parts) {
        uploads.push_back({t, offset, group.matrix});
        offset += t->data.size() * unit;
      }
    }
    for (const auto& [name, t] : l.tensors) {
      if (!group_of.contains(name)) {
        return absl::InternalError(
            absl::StrCat("layer ", i, ": tensor \"", name, "\" is in no device group"));
      }
    }
  }
  const size_t final_weight = optional(w.final_norm_weight, false);
  const size_t final_bias = optional(w.final_norm_bias, false);
  const size_t head = config.tie_embeddings ? embedding : add_vocab_rows(w.lm_head);

  CudaWeights weights;
  weights.padded_vocab = padded_vocab;
  absl::StatusOr<DeviceBuffer> buffer =
      DeviceBuffer::Allocate(layout.size(), absl::StrCat("the weights (", cuda::DTypeName(dtype),
                                                         ", ", w.ParameterCount(), " parameters)"));
  if (!buffer.ok()) return buffer.status();
  weights.buffer = *std::move(buffer);

  // Matrices go through an fp32 staging buffer and are rounded on the device.
  size_t staging_floats = 0;
  for (const Upload& u : uploads) {
    if (u.convert && dtype != DType::kF32)
      staging_floats = std::max(staging_floats, u.tensor->data.size());
  }
  absl::StatusOr<DeviceBuffer> staging =
      DeviceBuffer::Allocate(staging_floats * sizeof(float), "the weight upload staging buffer");
  if (!staging.ok()) return staging.status();
  char* base = weights.buffer.as<char>();
  for (const Upload& u : uploads) {
    const Tensor& t = *u.tensor;
    const size_t bytes = t.data.size() * sizeof(float);
    if (u.zero_bytes > 0) {
      LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          base + u.offset + t.data.size() * element, 0, u.zero_bytes, stream));
    }
    if (!u.convert || dtype == DType::kF32) {
      LINSERVE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(base + u.offset, t.data.data(), bytes, cudaMemcpyHostToDevice, stream));
    } else {
      LINSERVE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(staging->data(), t.data.data(), bytes, cudaMemcpyHostToDevice, stream));
      // Stream order keeps the next tensor's copy into staging behind this conversion.
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchConvert(stream, staging->as<float>(),
                                                   static_cast<int64_t>(t.data.size()), dtype,
                                                   base + u.offset));
    }
  }
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  auto at = [&](size_t offset) -> const char* {
    return offset == kAbsent ? nullptr : base + offset;
  };
  auto at_f = [&](size_t offset) { return reinterpret_cast<const float*>(at(offset)); };
  weights.embedding = at(embedding);
  weights.position_embedding = at(position);
  weights.head = at(head);
  weights.final_norm_weight = at_f(final_weight);
  weights.final_norm_bias = at_f(final_bias);
  for (const std::map<std::string, size_t>& layer : offsets) {
    CudaLayerWeights& lw = weights.layers.emplace_back();
    for (const auto& [name, offset] : layer) lw.groups[name] = at(offset);
  }
  return weights;
}

}  // namespace linserve
