#include "model/backend/cuda/cuda_weights.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>
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
  // q, k, v must be adjacent rows of one matrix (and their biases one vector): reserve the
  // fused block, then place the three parts inside it. Their sizes may differ (the Taylor
  // mixer's q and k are narrower than its v). Absent (a layer whose mixer has no q) or not.
  auto add_fused = [&](const Tensor& q, const Tensor& k, const Tensor& v, bool convert) {
    if (q.empty()) return kAbsent;
    const size_t unit = convert ? element : sizeof(float);
    const size_t q_bytes = q.data.size() * unit, k_bytes = k.data.size() * unit;
    const size_t offset = layout.Reserve(q_bytes + k_bytes + v.data.size() * unit);
    uploads.push_back({&q, offset, convert});
    uploads.push_back({&k, offset + q_bytes, convert});
    uploads.push_back({&v, offset + q_bytes + k_bytes, convert});
    return offset;
  };

  struct LayerOffsets {
    size_t qkv_weight, qkv_bias, o_weight, o_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias,
        ln1_weight, ln1_bias, ln2_weight, ln2_bias, favor, conv_in_weight, conv_in_bias,
        conv_weight, conv_bias, conv_out_weight, conv_out_bias;
  };
  // Which tensors a layer has is declared by its kinds (model/layers/); the rest are absent.
  auto optional = [&](const Tensor& t, bool convert) {
    return t.empty() ? kAbsent : add(t, convert);
  };
  std::vector<LayerOffsets> offsets;
  const size_t embedding = add_vocab_rows(w.token_embedding);
  const size_t position =
      config.position == PositionEmbedding::kLearned ? add(w.position_embedding, true) : kAbsent;
  for (const LayerWeights& l : w.layers) {
    // The tensor under the first of `names` the layer holds (the MLP kinds name fc1 and fc2
    // under their own prefixes), or an empty one.
    auto get = [&l](std::initializer_list<std::string_view> names) -> const Tensor& {
      static const Tensor* const kNone = new Tensor;
      for (std::string_view name : names) {
        if (const Tensor* t = l.Find(name)) return *t;
      }
      return *kNone;
    };
    LayerOffsets o;
    o.qkv_weight = add_fused(get({"attn.q_proj.weight"}), get({"attn.k_proj.weight"}),
                             get({"attn.v_proj.weight"}), true);
    o.qkv_bias = add_fused(get({"attn.q_proj.bias"}), get({"attn.k_proj.bias"}),
                           get({"attn.v_proj.bias"}), false);
    o.o_weight = optional(get({"attn.o_proj.weight"}), true);
    o.o_bias = optional(get({"attn.o_proj.bias"}), false);
    o.fc1_weight = optional(get({"ffn.fc1.weight", "mlp.fc1.weight"}), true);
    o.fc1_bias = optional(get({"ffn.fc1.bias", "mlp.fc1.bias"}), false);
    o.fc2_weight = optional(get({"ffn.fc2.weight", "mlp.fc2.weight"}), true);
    o.fc2_bias = optional(get({"ffn.fc2.bias", "mlp.fc2.bias"}), false);
    o.ln1_weight = optional(get({"ln1.weight"}), false);
    o.ln1_bias = optional(get({"ln1.bias"}), false);
    o.ln2_weight = optional(get({"ln2.weight"}), false);
    o.ln2_bias = optional(get({"ln2.bias"}), false);
    o.favor = optional(get({"attn.favor_projection"}), false);
    o.conv_in_weight = optional(get({"conv.in_proj.weight"}), true);
    o.conv_in_bias = optional(get({"conv.in_proj.bias"}), false);
    o.conv_weight = optional(get({"conv.weight"}), false);
    o.conv_bias = optional(get({"conv.bias"}), false);
    o.conv_out_weight = optional(get({"conv.out_proj.weight"}), true);
    o.conv_out_bias = optional(get({"conv.out_proj.bias"}), false);
    offsets.push_back(o);
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
  for (const LayerOffsets& o : offsets) {
    CudaLayerWeights p;
    p.qkv_weight = at(o.qkv_weight);
    p.qkv_bias = at_f(o.qkv_bias);
    p.o_weight = at(o.o_weight);
    p.o_bias = at_f(o.o_bias);
    p.fc1_weight = at(o.fc1_weight);
    p.fc1_bias = at_f(o.fc1_bias);
    p.fc2_weight = at(o.fc2_weight);
    p.fc2_bias = at_f(o.fc2_bias);
    p.ln1_weight = at_f(o.ln1_weight);
    p.ln1_bias = at_f(o.ln1_bias);
    p.ln2_weight = at_f(o.ln2_weight);
    p.ln2_bias = at_f(o.ln2_bias);
    p.favor = at_f(o.favor);
    p.conv_in_weight = at(o.conv_in_weight);
    p.conv_in_bias = at_f(o.conv_in_bias);
    p.conv_weight = at_f(o.conv_weight);
    p.conv_bias = at_f(o.conv_bias);
    p.conv_out_weight = at(o.conv_out_weight);
    p.conv_out_bias = at_f(o.conv_out_bias);
    weights.layers.push_back(p);
  }
  return weights;
}

}  // namespace linserve
