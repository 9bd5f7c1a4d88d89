#include "model/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/logprobs.h"
#include "kernels/cuda/mt19937_64.h"
#include "kernels/cuda/sampling.h"
#include "model/backend/slot_pool.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

using cuda::DeviceBuffer;
using cuda::DType;
using cuda::FormatBytes;

// Decode rows are a grid dimension of the attention kernel (at most 65535).
constexpr int32_t kMaxBatch = 1 << 15;
// Tokens of one prefill pass through the layers; longer prompts are fed in such segments.
constexpr int kPrefillSegment = 2048;
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr size_t kAlignment = 256;

#define LINSERVE_RETURN_IF_ERROR(expr)                                    \
  do {                                                                    \
    if (absl::Status linserve_status_ = (expr); !linserve_status_.ok()) { \
      return linserve_status_;                                            \
    }                                                                     \
  } while (false)

DType ToDType(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kBf16:
      return DType::kBf16;
    case WeightPrecision::kFp16:
      return DType::kF16;
    case WeightPrecision::kFp32:
      return DType::kF32;
  }
  return DType::kBf16;
}

cuda::FeatureMapKind ToKernel(FeatureMap m) {
  switch (m) {
    case FeatureMap::kEluPlusOne:
      return cuda::FeatureMapKind::kEluPlusOne;
    case FeatureMap::kRelu:
      return cuda::FeatureMapKind::kRelu;
    case FeatureMap::kExp:
      return cuda::FeatureMapKind::kExp;
    case FeatureMap::kFavorPlus:
      return cuda::FeatureMapKind::kFavorPlus;
  }
  return cuda::FeatureMapKind::kEluPlusOne;
}

cuda::ActivationKind ToKernel(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return cuda::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cuda::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cuda::ActivationKind::kRelu;
  }
  return cuda::ActivationKind::kGelu;
}

cuda::PositionKind ToKernel(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::kLearned:
      return cuda::PositionKind::kLearned;
    case PositionEmbedding::kSinusoidal:
      return cuda::PositionKind::kSinusoidal;
    case PositionEmbedding::kNone:
      return cuda::PositionKind::kNone;
  }
  return cuda::PositionKind::kNone;
}


size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Hands out aligned offsets within one allocation; pointers are resolved once it is allocated.
class Layout {
 public:
  size_t Reserve(size_t bytes) {
    const size_t offset = size_;
    size_ += AlignUp(bytes);
    return offset;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

// Batch-size buckets for CUDA graphs: powers of two below max_batch, then max_batch.
std::vector<int> MakeBuckets(int max_batch) {
  std::vector<int> buckets;
  for (int b = 1; b < max_batch; b *= 2) buckets.push_back(b);
  buckets.push_back(max_batch);
  return buckets;
}

// Consecutive rows of one prefill pass: tokens of one slot, starting at a multiple of the
// chunk size from the first token of the call's item (so the attention kernel, which chunks
// from its first row, sees the chunks of the item fed alone).
struct PrefillPiece {
  int32_t slot;
  int first_row;
  int rows;
};

// Host-pinned mirror of the per-row inputs of a step (tokens, positions, slots).
struct RowInputs {
  int32_t* tokens;
  int64_t* positions;
  int32_t* slots;
};

// A step's samples as they cross PCIe, in pinned host memory and (same shape) on the device:
// a token per row and, only when some row asks for them, how many alternatives each row wants,
// the sampled token's logprob and the alternatives.
struct SampleBuffers {
  int32_t* tokens;
  int32_t* top_n;       // [rows]
  float* logprobs;      // [rows]
  int32_t* top_ids;     // [rows, kMaxTopLogprobs]
  float* top_logprobs;  // [rows, kMaxTopLogprobs]
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(const ModelConfig& config, const BackendOptions& options,
                  const CudaBackendOptions& cuda_options, int32_t capacity)
      : config_(config),
        options_(options),
        cuda_options_(cuda_options),
        dtype_(ToDType(options.weight_precision)),
        pool_(config_, options, capacity),
        state_floats_(config.StateFloatsPerSlot()),
        layer_floats_(static_cast<int64_t>(config.n_heads) * config.feature_dim *
                      (config.head_dim + 1)),
        buckets_(MakeBuckets(options.max_batch_size)),
        segment_(std::max(options.prefill_chunk_size, kPrefillSegment / options.prefill_chunk_size *
                                                          options.prefill_chunk_size)),
        rows_(std::max(options.max_batch_size, segment_)),
        sampling_ready_(static_cast<size_t>(capacity), 0),
        top_logprobs_(static_cast<size_t>(capacity), 0),
        graphs_(buckets_.size()) {}

  absl::Status Initialize(const Model& model);

  DeviceKind device() const override { return DeviceKind::kCuda; }
  const ModelConfig& config() const override { return config_; }
  int32_t slot_capacity() const override { return pool_.capacity(); }
  int32_t free_slots() const override { return pool_.free_slots(); }

  absl::StatusOr<SlotId> AllocateSlot() override;
  void FreeSlot(SlotId slot) override;
  absl::Status ResetSlot(SlotId slot) override;
  absl::Status CopySlot(SlotId from, SlotId to) override;
  absl::StatusOr<int64_t> SlotPosition(SlotId slot) const override;
  absl::Status Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                       absl::Span<float> logits) override;
  absl::Status Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) override;
  absl::Status ReadSlot(SlotId slot, StateBlob& out) const override;
  absl::Status WriteSlot(SlotId slot, const StateBlob& in) override;

  absl::Status StartSampling(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                             absl::Span<const TokenId> observed) override;
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) override;
  absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                               const SampleOutput& out) override;
  absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                const SampleOutput& out) override;
  // Passes of up to 2048 rows holding several sessions' tokens: the GEMMs run over the whole
  // pass, the prefill attention kernel once per session (piece) inside the layer loop.
  absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) override;

  // The step runs on the backend's stream; the host returns at once. Every other call that
  // stages through the pinned buffers first finishes it (FinishLaunched): its GPU work would
  // queue behind the step anyway.
  bool asynchronous() const override { return true; }
  absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                     const SampleOutput& out) override;
  absl::Status CollectSamples() override;
  CudaMemoryUse memory_use() const override { return memory_; }
  std::string device_description() const override { return description_; }

 private:
  struct LayerPointers {
    const void* qkv_weight = nullptr;  // T [3·H·Dh, d]: q rows, then k, then v
    const float* qkv_bias = nullptr;   // [3·H·Dh] or null
    const void* o_weight = nullptr;
    const float* o_bias = nullptr;
    const void* fc1_weight = nullptr;
    const float* fc1_bias = nullptr;
    const void* fc2_weight = nullptr;
    const float* fc2_bias = nullptr;
    const float* ln1_weight = nullptr;
    const float* ln1_bias = nullptr;
    const float* ln2_weight = nullptr;
    const float* ln2_bias = nullptr;
    const float* favor = nullptr;
  };

  absl::Status UploadWeights(const Model& model);
  absl::Status AllocatePoolsAndWorkspace();

  absl::Status SetDevice() const {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda_options_.device));
    return absl::OkStatus();
  }
  absl::Status Synchronize() const {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  }
  float* SlotState(int32_t slot) const { return state_pool_.as<float>() + slot * state_floats_; }
  int32_t* SlotCounts(int32_t slot) const {
    return sampler_.seen_counts + static_cast<int64_t>(slot) * config_.vocab_size;
  }
  // Zeroes a slot's state and seen counts (enqueued; the caller synchronizes).
  absl::Status EnqueueClear(int32_t slot);
  // Checks `out` for `slots` (tokens per row; logprob spans when a slot asks for them) and that
  // every slot has had StartSampling.
  absl::Status CheckSampleOutput(absl::Span<const int32_t> slots, const SampleOutput& out,
                                 absl::string_view what) const;
  // Enqueues the picks of rows [0, sample_slots_.size()) of logits_ for the slots in
  // slots_dev_ (mirrored by sample_slots_), the logprobs of the rows whose slot asks for them,
  // and their copy to the pinned samples_host_; says whether any row asked.
  absl::StatusOr<bool> EnqueueSample();
  // Copies the pinned samples of the rows in sample_slots_ to `out` (the stream has finished).
  void CopySamples(bool logprobs, const SampleOutput& out) const;
  // The step launched and not yet collected: waits for it and copies its samples to its
  // output, so that the pinned buffers are free again. Returns the step's outcome.
  absl::Status FinishLaunched() const;
  // Prefill's body after validation: `all_logits` (host, n × vocab) or `last_logits` (host,
  // vocab) receive logits when non-null; the last position's logits stay in logits_ row 0.
  absl::Status RunPrefill(SlotId slot, absl::Span<const TokenId> tokens, float* all_logits,
                          float* last_logits, bool last_on_device);
  // PrefillBatch's body after validation: feeds every item and leaves the last position's
  // logits of each sampling item in logits_, one row each in batch order.
  absl::Status RunPrefillBatch(absl::Span<const PrefillItem> batch);

  cuda::AttentionShape Shape(int layer) const {
    cuda::AttentionShape shape;
    shape.heads = config_.n_heads;
    shape.head_dim = config_.head_dim;
    shape.feature_dim = config_.feature_dim;
    shape.feature_map = ToKernel(config_.feature_map);
    shape.favor = layers_[static_cast<size_t>(layer)].favor;
    shape.eps = static_cast<float>(config_.attention_eps);
    return shape;
  }
  void* RowPtr(void* base, int64_t row, int64_t width) const {
    return static_cast<char*>(base) + row * width * static_cast<int64_t>(cuda::DTypeSize(dtype_));
  }

  // Enqueues embedding + every layer for `rows` rows whose inputs are in the device row
  // buffers. No pieces: decode (row i updates slots_dev_[i]); otherwise the rows are the
  // pieces' (prefill). Leaves the LM head's input (T) in xt_.
  absl::Status EnqueueLayers(int rows, absl::Span<const PrefillPiece> pieces);
  // Copies the pinned row inputs of `rows` rows to the device.
  absl::Status EnqueueRowInputs(int rows);
  // Row inputs upload + layers + LM head for a decode bucket; logits land in logits_.
  absl::Status EnqueueDecodeStep(int rows);
  // Runs one decode step for `batch` (validated): fills the pinned inputs, pads to the bucket,
  // and launches the bucket's graph (capturing it on first use) or the kernels directly.
  absl::Status RunDecodeStep(absl::Span<const DecodeItem> batch);
  absl::Status CaptureGraph(size_t bucket_index);

  const ModelConfig config_;
  const BackendOptions options_;
  const CudaBackendOptions cuda_options_;
  const DType dtype_;
  SlotPool pool_;
  const int64_t state_floats_;
  const int64_t layer_floats_;
  const std::vector<int> buckets_;
  const int segment_;  // prefill tokens per pass, a multiple of the chunk size
  const int rows_;     // activation rows: max(max_batch_size, segment_)
  std::string description_;
  CudaMemoryUse memory_;

  cuda::Stream stream_;
  std::unique_ptr<cuda::Gemm> gemm_;

  DeviceBuffer weights_;
  std::vector<LayerPointers> layers_;
  const void* embedding_ = nullptr;
  const void* position_embedding_ = nullptr;
  const void* head_ = nullptr;
  const float* final_norm_weight_ = nullptr;
  const float* final_norm_bias_ = nullptr;

  DeviceBuffer state_pool_;
  DeviceBuffer sampler_buffer_;
  cuda::SamplerSlots sampler_;

  DeviceBuffer workspace_;
  float* x_ = nullptr;       // [rows_, d] residual stream
  void* xt_ = nullptr;       // T [rows_, d] next GEMM input (normalised / cast)
  float* qkv_ = nullptr;     // [rows_, 3·H·Dh]
  void* attn_ = nullptr;     // T [rows_, H·Dh]
  float* proj_ = nullptr;    // [rows_, d] output of o_proj / fc2
  float* ff_ = nullptr;      // [rows_, d_ff]
  void* fft_ = nullptr;      // T [rows_, d_ff]
  float* logits_ = nullptr;  // [max_batch_size, vocab]
  float* attention_scratch_ = nullptr;
  int32_t* tokens_dev_ = nullptr;
  int64_t* positions_dev_ = nullptr;
  int32_t* slots_dev_ = nullptr;
  SampleBuffers samples_dev_{};
  cuda::PinnedBuffer pinned_;
  RowInputs host_rows_{};
  SampleBuffers samples_host_{};

  // A launched step until CollectSamples: its output, whether any row asked for logprobs, and
  // once FinishLaunched has run, its outcome.
  struct Launched {
    SampleOutput out;
    bool logprobs = false;
    std::optional<absl::Status> outcome;
  };
  mutable std::optional<Launched> launched_;

  std::vector<char> sampling_ready_;   // per slot: StartSampling since cleared
  std::vector<int32_t> top_logprobs_;  // per slot
  std::vector<int32_t> sample_slots_;  // host mirror of slots_dev_ for the sampled rows
  std::vector<PrefillPiece> pieces_;   // a prefill pass's pieces, in row order
  std::vector<int> pending_head_rows_;  // a pass's rows whose logits a sampling item wants
  std::vector<int32_t> dense_counts_;  // SetSeenCounts staging, vocab entries
  std::vector<cuda::GraphExec> graphs_;  // per bucket, empty until first use
};

// ---- Creation --------------------------------------------------------------------------

absl::Status CudaBackendImpl::Initialize(const Model& model) {
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  cudaDeviceProp properties{};
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, cuda_options_.device));
  description_ = absl::StrFormat("%s (sm_%d%d, %d SMs, %s)", properties.name, properties.major,
                                 properties.minor, properties.multiProcessorCount,
                                 FormatBytes(properties.totalGlobalMem));
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create();
  if (!stream.ok()) return stream.status();
  stream_ = *std::move(stream);
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(kGemmWorkspaceBytes);
  if (!gemm.ok()) return gemm.status();
  gemm_ = *std::move(gemm);
  LINSERVE_RETURN_IF_ERROR(UploadWeights(model));
  LINSERVE_RETURN_IF_ERROR(AllocatePoolsAndWorkspace());
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    LINSERVE_RETURN_IF_ERROR(cuda::CheckAttentionShape(Shape(layer)));
  }
  return Synchronize();
}

absl::Status CudaBackendImpl::UploadWeights(const Model& model) {
  const ModelWeights& w = model.weights;
  const size_t element = cuda::DTypeSize(dtype_);
  Layout layout;
  // Offsets of every tensor in the one weights allocation, recorded in upload order.
  struct Upload {
    const Tensor* tensor;
    size_t offset;
    bool convert;  // stored in dtype_ (matrices) or kept fp32 (vectors, favor projections)
  };
  std::vector<Upload> uploads;
  auto add = [&](const Tensor& t, bool convert) -> size_t {
    const size_t offset = layout.Reserve(t.data.size() * (convert ? element : sizeof(float)));
    uploads.push_back({&t, offset, convert});
    return offset;
  };
  // q, k, v must be adjacent rows of one matrix (and their biases one vector): reserve the
  // fused block, then place the three parts inside it.
  auto add_fused = [&](const Tensor& q, const Tensor& k, const Tensor& v, bool convert) {
    const size_t part = q.data.size() * (convert ? element : sizeof(float));
    const size_t offset = layout.Reserve(3 * part);
    uploads.push_back({&q, offset, convert});
    uploads.push_back({&k, offset + part, convert});
    uploads.push_back({&v, offset + 2 * part, convert});
    return offset;
  };

  struct LayerOffsets {
    size_t qkv_weight, qkv_bias, o_weight, o_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias,
        ln1_weight, ln1_bias, ln2_weight, ln2_bias, favor;
  };
  constexpr size_t kAbsent = static_cast<size_t>(-1);
  auto optional = [&](const Tensor& t, bool convert) {
    return t.empty() ? kAbsent : add(t, convert);
  };
  std::vector<LayerOffsets> offsets;
  const size_t embedding = add(w.token_embedding, true);
  const size_t position =
      config_.position == PositionEmbedding::kLearned ? add(w.position_embedding, true) : kAbsent;
  for (const LayerWeights& l : w.layers) {
    LayerOffsets o;
    o.qkv_weight = add_fused(l.q_weight, l.k_weight, l.v_weight, true);
    o.qkv_bias = l.q_bias.empty() ? kAbsent : add_fused(l.q_bias, l.k_bias, l.v_bias, false);
    o.o_weight = add(l.o_weight, true);
    o.o_bias = optional(l.o_bias, false);
    o.fc1_weight = add(l.fc1_weight, true);
    o.fc1_bias = optional(l.fc1_bias, false);
    o.fc2_weight = add(l.fc2_weight, true);
    o.fc2_bias = optional(l.fc2_bias, false);
    o.ln1_weight = add(l.ln1_weight, false);
    o.ln1_bias = add(l.ln1_bias, false);
    o.ln2_weight = add(l.ln2_weight, false);
    o.ln2_bias = add(l.ln2_bias, false);
    o.favor = optional(l.favor_projection, false);
    offsets.push_back(o);
  }
  const size_t final_weight = optional(w.final_norm_weight, false);
  const size_t final_bias = optional(w.final_norm_bias, false);
  const size_t head = config_.tie_embeddings ? embedding : add(w.lm_head, true);

  absl::StatusOr<DeviceBuffer> weights = DeviceBuffer::Allocate(
      layout.size(), absl::StrCat("the weights (", cuda::DTypeName(dtype_), ", ",
                                  model.weights.ParameterCount(), " parameters)"));
  if (!weights.ok()) return weights.status();
  weights_ = *std::move(weights);
  memory_.weights_bytes = static_cast<int64_t>(layout.size());

  // Matrices go through an fp32 staging buffer and are rounded on the device.
  size_t staging_floats = 0;
  for (const Upload& u : uploads) {
    if (u.convert && dtype_ != DType::kF32)
      staging_floats = std::max(staging_floats, u.tensor->data.size());
  }
  absl::StatusOr<DeviceBuffer> staging =
      DeviceBuffer::Allocate(staging_floats * sizeof(float), "the weight upload staging buffer");
  if (!staging.ok()) return staging.status();
  char* base = weights_.as<char>();
  for (const Upload& u : uploads) {
    const Tensor& t = *u.tensor;
    const size_t bytes = t.data.size() * sizeof(float);
    if (!u.convert || dtype_ == DType::kF32) {
      LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + u.offset, t.data.data(), bytes,
                                                    cudaMemcpyHostToDevice, stream_.get()));
    } else {
      LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging->data(), t.data.data(), bytes,
                                                    cudaMemcpyHostToDevice, stream_.get()));
      // Stream order keeps the next tensor's copy into staging behind this conversion.
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchConvert(stream_.get(), staging->as<float>(),
                                                   static_cast<int64_t>(t.data.size()), dtype_,
                                                   base + u.offset));
    }
  }
  LINSERVE_RETURN_IF_ERROR(Synchronize());

  auto at = [&](size_t offset) -> const char* {
    return offset == kAbsent ? nullptr : base + offset;
  };
  auto at_f = [&](size_t offset) { return reinterpret_cast<const float*>(at(offset)); };
  embedding_ = at(embedding);
  position_embedding_ = at(position);
  head_ = at(head);
  final_norm_weight_ = at_f(final_weight);
  final_norm_bias_ = at_f(final_bias);
  layers_.clear();
  for (const LayerOffsets& o : offsets) {
    LayerPointers p;
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
    layers_.push_back(p);
  }
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::AllocatePoolsAndWorkspace() {
  const int64_t vocab = config_.vocab_size;
  const int64_t slot_bytes = state_floats_ * static_cast<int64_t>(sizeof(float));
  const int64_t pool_bytes = static_cast<int64_t>(pool_.capacity()) * slot_bytes;
  const size_t slots = static_cast<size_t>(pool_.capacity());
  Layout sampler_layout;
  const size_t sampler_params = sampler_layout.Reserve(slots * sizeof(cuda::DeviceSamplingParams));
  const size_t sampler_rngs = sampler_layout.Reserve(slots * sizeof(cuda::Mt19937_64));
  const size_t sampler_counts =
      sampler_layout.Reserve(slots * static_cast<size_t>(vocab) * sizeof(int32_t));
  const int64_t sampler_bytes = static_cast<int64_t>(sampler_layout.size());

  const int64_t d = config_.d_model;
  const int64_t hd = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const int64_t rows = rows_;
  const size_t element = cuda::DTypeSize(dtype_);
  Layout work;
  const size_t x = work.Reserve(rows * d * sizeof(float));
  const size_t xt = work.Reserve(rows * d * element);
  const size_t qkv = work.Reserve(rows * 3 * hd * sizeof(float));
  const size_t attn = work.Reserve(rows * hd * element);
  const size_t proj = work.Reserve(rows * d * sizeof(float));
  const size_t ff = work.Reserve(rows * config_.d_ff * sizeof(float));
  const size_t fft = work.Reserve(rows * config_.d_ff * element);
  const size_t logits =
      work.Reserve(static_cast<size_t>(options_.max_batch_size) * vocab * sizeof(float));
  const size_t scratch = work.Reserve(
      cuda::PrefillAttentionScratchFloats(Shape(0), segment_, options_.prefill_chunk_size) *
      sizeof(float));
  const size_t tokens = work.Reserve(rows * sizeof(int32_t));
  const size_t positions = work.Reserve(rows * sizeof(int64_t));
  const size_t row_slots = work.Reserve(rows * sizeof(int32_t));
  auto reserve_samples = [&](Layout& layout) {
    return std::array<size_t, 5>{
        layout.Reserve(rows * sizeof(int32_t)), layout.Reserve(rows * sizeof(int32_t)),
        layout.Reserve(rows * sizeof(float)),
        layout.Reserve(rows * kMaxTopLogprobs * sizeof(int32_t)),
        layout.Reserve(rows * kMaxTopLogprobs * sizeof(float))};
  };
  auto samples_at = [](char* base, const std::array<size_t, 5>& at) {
    return SampleBuffers{reinterpret_cast<int32_t*>(base + at[0]),
                      reinterpret_cast<int32_t*>(base + at[1]),
                      reinterpret_cast<float*>(base + at[2]),
                      reinterpret_cast<int32_t*>(base + at[3]),
                      reinterpret_cast<float*>(base + at[4])};
  };
  const std::array<size_t, 5> samples = reserve_samples(work);

  // Say up front what does not fit, with the whole plan, rather than fail on the third cudaMalloc.
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t needed = static_cast<uint64_t>(pool_bytes) + static_cast<uint64_t>(sampler_bytes) +
                          work.size() + kGemmWorkspaceBytes;
  if (needed > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA backend: the state pool (", pool_.capacity(), " slots × ", FormatBytes(slot_bytes),
        " = ", FormatBytes(pool_bytes), "), the sampler state (", FormatBytes(sampler_bytes),
        ") and the activations (", FormatBytes(work.size() + kGemmWorkspaceBytes), ") need ",
        FormatBytes(needed), " but ", description_, " has ", FormatBytes(free_bytes),
        " free after the weights (", FormatBytes(memory_.weights_bytes),
        "); lower BackendOptions.state_memory_budget_bytes (", options_.state_memory_budget_bytes,
        ") or max_slots (", options_.max_slots, ")"));
  }

  absl::StatusOr<DeviceBuffer> pool = DeviceBuffer::Allocate(
      static_cast<size_t>(pool_bytes),
      absl::StrCat("the state pool (", pool_.capacity(), " slots × ", FormatBytes(slot_bytes),
                   ")"));
  if (!pool.ok()) return pool.status();
  state_pool_ = *std::move(pool);
  memory_.state_pool_bytes = pool_bytes;

  absl::StatusOr<DeviceBuffer> sampler = DeviceBuffer::Allocate(
      static_cast<size_t>(sampler_bytes),
      absl::StrCat("the device sampler state (", pool_.capacity(), " slots)"));
  if (!sampler.ok()) return sampler.status();
  sampler_buffer_ = *std::move(sampler);
  memory_.sampler_bytes = sampler_bytes;
  char* sampler_base = sampler_buffer_.as<char>();
  sampler_.params = reinterpret_cast<cuda::DeviceSamplingParams*>(sampler_base + sampler_params);
  sampler_.rngs = reinterpret_cast<cuda::Mt19937_64*>(sampler_base + sampler_rngs);
  sampler_.seen_counts = reinterpret_cast<int32_t*>(sampler_base + sampler_counts);

  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::Allocate(work.size(), absl::StrCat("the activations (", rows_, " rows)"));
  if (!workspace.ok()) return workspace.status();
  workspace_ = *std::move(workspace);
  memory_.workspace_bytes = static_cast<int64_t>(work.size() + kGemmWorkspaceBytes);
  char* w = workspace_.as<char>();
  x_ = reinterpret_cast<float*>(w + x);
  xt_ = w + xt;
  qkv_ = reinterpret_cast<float*>(w + qkv);
  attn_ = w + attn;
  proj_ = reinterpret_cast<float*>(w + proj);
  ff_ = reinterpret_cast<float*>(w + ff);
  fft_ = w + fft;
  logits_ = reinterpret_cast<float*>(w + logits);
  attention_scratch_ = reinterpret_cast<float*>(w + scratch);
  tokens_dev_ = reinterpret_cast<int32_t*>(w + tokens);
  positions_dev_ = reinterpret_cast<int64_t*>(w + positions);
  slots_dev_ = reinterpret_cast<int32_t*>(w + row_slots);
  samples_dev_ = samples_at(w, samples);

  Layout host;
  const size_t host_tokens = host.Reserve(rows * sizeof(int32_t));
  const size_t host_positions = host.Reserve(rows * sizeof(int64_t));
  const size_t host_slots = host.Reserve(rows * sizeof(int32_t));
  const std::array<size_t, 5> host_samples = reserve_samples(host);
  absl::StatusOr<cuda::PinnedBuffer> pinned =
      cuda::PinnedBuffer::Allocate(host.size(), "the pinned step inputs");
  if (!pinned.ok()) return pinned.status();
  pinned_ = *std::move(pinned);
  char* h = pinned_.as<char>();
  host_rows_.tokens = reinterpret_cast<int32_t*>(h + host_tokens);
  host_rows_.positions = reinterpret_cast<int64_t*>(h + host_positions);
  host_rows_.slots = reinterpret_cast<int32_t*>(h + host_slots);
  samples_host_ = samples_at(h, host_samples);
  return absl::OkStatus();
}

// ---- Slots -----------------------------------------------------------------------------

absl::Status CudaBackendImpl::EnqueueClear(int32_t slot) {
  cudaStream_t s = stream_.get();
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      SlotState(slot), 0, static_cast<size_t>(state_floats_) * sizeof(float), s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      SlotCounts(slot), 0, static_cast<size_t>(config_.vocab_size) * sizeof(int32_t), s));
  sampling_ready_[slot] = 0;
  return absl::OkStatus();
}

absl::StatusOr<SlotId> CudaBackendImpl::AllocateSlot() {
  if (pool_.free_slots() == 0) return pool_.Allocate().status();
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  absl::StatusOr<SlotId> slot = pool_.Allocate();
  if (!slot.ok()) return slot.status();
  absl::Status cleared = EnqueueClear(slot->value);
  if (cleared.ok()) cleared = Synchronize();
  if (!cleared.ok()) {
    pool_.Free(*slot);
    return cleared;
  }
  return *slot;
}

void CudaBackendImpl::FreeSlot(SlotId slot) {
  if (pool_.Free(slot)) sampling_ready_[slot.value] = 0;
}

absl::Status CudaBackendImpl::ResetSlot(SlotId slot) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "ResetSlot: slot"));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(EnqueueClear(slot.value));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  pool_.set_position(slot, 0);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::CopySlot(SlotId from, SlotId to) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(from, "CopySlot: from"));
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(to, "CopySlot: to"));
  if (from == to) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopySlot: from and to are the same slot (", from.value, ")"));
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  cudaStream_t s = stream_.get();
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(SlotState(to.value), SlotState(from.value),
                                                static_cast<size_t>(state_floats_) * sizeof(float),
                                                cudaMemcpyDeviceToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      SlotCounts(to.value), SlotCounts(from.value),
      static_cast<size_t>(config_.vocab_size) * sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
  if (sampling_ready_[from.value]) {
    LINSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(sampler_.rngs + to.value, sampler_.rngs + from.value,
                        sizeof(cuda::Mt19937_64), cudaMemcpyDeviceToDevice, s));
    LINSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(sampler_.params + to.value, sampler_.params + from.value,
                        sizeof(cuda::DeviceSamplingParams), cudaMemcpyDeviceToDevice, s));
  }
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  pool_.set_position(to, pool_.position(from));
  sampling_ready_[to.value] = sampling_ready_[from.value];
  top_logprobs_[to.value] = top_logprobs_[from.value];
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackendImpl::SlotPosition(SlotId slot) const {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "SlotPosition: slot"));
  return pool_.position(slot);
}

absl::Status CudaBackendImpl::ReadSlot(SlotId slot, StateBlob& out) const {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "ReadSlot: slot"));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  out.state.resize(static_cast<size_t>(state_floats_));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.state.data(), SlotState(slot.value),
                                                static_cast<size_t>(state_floats_) * sizeof(float),
                                                cudaMemcpyDeviceToHost, stream_.get()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  out.position = pool_.position(slot);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::WriteSlot(SlotId slot, const StateBlob& in) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckWrite(slot, in));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(EnqueueClear(slot.value));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(SlotState(slot.value), in.state.data(),
                                                static_cast<size_t>(state_floats_) * sizeof(float),
                                                cudaMemcpyHostToDevice, stream_.get()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  pool_.set_position(slot, in.position);
  return absl::OkStatus();
}

// ---- Compute ---------------------------------------------------------------------------

absl::Status CudaBackendImpl::EnqueueRowInputs(int rows) {
  cudaStream_t s = stream_.get();
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_dev_, host_rows_.tokens,
                                                rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(positions_dev_, host_rows_.positions,
                                                rows * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots_dev_, host_rows_.slots,
                                                rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::EnqueueLayers(int rows, absl::Span<const PrefillPiece> pieces) {
  cudaStream_t s = stream_.get();
  const int64_t d = config_.d_model;
  const int64_t hd = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const int64_t ff = config_.d_ff;
  const bool pre = config_.norm == NormPlacement::kPre;
  const float ln_eps = static_cast<float>(config_.layer_norm_eps);

  cuda::EmbedArgs embed;
  embed.tokens = tokens_dev_;
  embed.positions = positions_dev_;
  embed.table = embedding_;
  embed.position = ToKernel(config_.position);
  embed.position_table = position_embedding_;
  embed.rows = rows;
  embed.d = config_.d_model;
  embed.dtype = dtype_;
  embed.x = x_;
  embed.x_t = pre ? nullptr : xt_;  // post-norm: the first GEMM reads x itself
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchEmbed(s, embed));

  auto layer_norm = [&](const float* delta, const float* delta_bias, const float* gamma,
                        const float* beta) {
    cuda::AddLayerNormArgs a;
    a.x = x_;
    a.delta = delta;
    a.delta_bias = delta_bias;
    a.gamma = gamma;
    a.beta = beta;
    a.eps = ln_eps;
    a.y_t = xt_;
    a.rows = rows;
    a.d = config_.d_model;
    a.dtype = dtype_;
    if (pre) {
      a.sum_out = x_;  // x += delta; the normalised copy only feeds the next GEMM
    } else {
      a.y = x_;  // x = LN(x + delta)
    }
    return cuda::LaunchAddLayerNorm(s, a);
  };

  if (pre) {
    LINSERVE_RETURN_IF_ERROR(
        layer_norm(nullptr, nullptr, layers_[0].ln1_weight, layers_[0].ln1_bias));
  }
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerPointers& w = layers_[static_cast<size_t>(l)];
    LINSERVE_RETURN_IF_ERROR(gemm_->Linear(s, dtype_, xt_, w.qkv_weight, qkv_, rows, 3 * hd, d));
    if (pieces.empty()) {
      cuda::DecodeAttentionArgs a;
      a.shape = Shape(l);
      a.qkv = qkv_;
      a.qkv_bias = w.qkv_bias;
      a.slots = slots_dev_;
      a.state = state_pool_.as<float>();
      a.slot_stride = state_floats_;
      a.layer_offset = l * layer_floats_;
      a.rows = rows;
      a.out_dtype = dtype_;
      a.out = attn_;
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchDecodeAttention(s, a));
    }
    // One launch per session, in stream order (they share the scratch).
    for (const PrefillPiece& piece : pieces) {
      cuda::PrefillAttentionArgs a;
      a.shape = Shape(l);
      a.qkv = qkv_ + piece.first_row * 3 * hd;
      a.qkv_bias = w.qkv_bias;
      a.state = SlotState(piece.slot) + l * layer_floats_;
      a.tokens = piece.rows;
      a.chunk = options_.prefill_chunk_size;
      a.scratch = attention_scratch_;
      a.out_dtype = dtype_;
      a.out = RowPtr(attn_, piece.first_row, hd);
      LINSERVE_RETURN_IF_ERROR(cuda::LaunchPrefillAttention(s, a));
    }
    LINSERVE_RETURN_IF_ERROR(gemm_->Linear(s, dtype_, attn_, w.o_weight, proj_, rows, d, hd));
    LINSERVE_RETURN_IF_ERROR(pre ? layer_norm(proj_, w.o_bias, w.ln2_weight, w.ln2_bias)
                                 : layer_norm(proj_, w.o_bias, w.ln1_weight, w.ln1_bias));
    LINSERVE_RETURN_IF_ERROR(gemm_->Linear(s, dtype_, xt_, w.fc1_weight, ff_, rows, ff, d));
    LINSERVE_RETURN_IF_ERROR(cuda::LaunchBiasActivation(
        s, ff_, w.fc1_bias, rows, ff, ToKernel(config_.activation), dtype_, fft_));
    LINSERVE_RETURN_IF_ERROR(gemm_->Linear(s, dtype_, fft_, w.fc2_weight, proj_, rows, d, ff));
    if (pre) {
      const bool last = l + 1 == config_.n_layers;
      const LayerPointers& next = layers_[static_cast<size_t>(last ? l : l + 1)];
      LINSERVE_RETURN_IF_ERROR(layer_norm(proj_, w.fc2_bias,
                                          last ? final_norm_weight_ : next.ln1_weight,
                                          last ? final_norm_bias_ : next.ln1_bias));
    } else {
      LINSERVE_RETURN_IF_ERROR(layer_norm(proj_, w.fc2_bias, w.ln2_weight, w.ln2_bias));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::EnqueueDecodeStep(int rows) {
  LINSERVE_RETURN_IF_ERROR(EnqueueRowInputs(rows));
  LINSERVE_RETURN_IF_ERROR(EnqueueLayers(rows, {}));
  return gemm_->Linear(stream_.get(), dtype_, xt_, head_, logits_, rows, config_.vocab_size,
                       config_.d_model);
}

absl::Status CudaBackendImpl::CaptureGraph(size_t bucket_index) {
  cudaStream_t s = stream_.get();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = EnqueueDecodeStep(buckets_[bucket_index]);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (!enqueued.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return enqueued;
  }
  LINSERVE_CUDA_RETURN_IF_ERROR(ended);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  LINSERVE_CUDA_RETURN_IF_ERROR(instantiated);
  graphs_[bucket_index] = cuda::GraphExec(exec);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::RunDecodeStep(absl::Span<const DecodeItem> batch) {
  const int rows = static_cast<int>(batch.size());
  const size_t bucket_index = static_cast<size_t>(
      std::lower_bound(buckets_.begin(), buckets_.end(), rows) - buckets_.begin());
  const int bucket = buckets_[bucket_index];
  for (int i = 0; i < bucket; ++i) {
    const bool real = i < rows;
    host_rows_.tokens[i] = real ? batch[i].token : 0;
    host_rows_.positions[i] = real ? pool_.position(batch[i].slot) : 0;
    host_rows_.slots[i] = real ? batch[i].slot.value : -1;  // padding: touches no slot
  }
  if (!cuda_options_.use_cuda_graphs) return EnqueueDecodeStep(bucket);
  if (graphs_[bucket_index]) {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_[bucket_index].get(), stream_.get()));
    return absl::OkStatus();
  }
  // First use of the bucket: run it directly (which also builds the GEMM plans the capture
  // needs), then capture the same sequence for the next steps.
  LINSERVE_RETURN_IF_ERROR(EnqueueDecodeStep(bucket));
  return CaptureGraph(bucket_index);
}

absl::Status CudaBackendImpl::Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckBatch(batch));
  const int64_t vocab = config_.vocab_size;
  if (static_cast<int64_t>(logits.size()) != static_cast<int64_t>(batch.size()) * vocab) {
    return absl::InvalidArgumentError(absl::StrCat("Decode: logits has ", logits.size(),
                                                   " floats; expected batch.size() × ",
                                                   "vocab_size = ", batch.size() * vocab));
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  LINSERVE_RETURN_IF_ERROR(RunDecodeStep(batch));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits.data(), logits_,
                                                logits.size() * sizeof(float),
                                                cudaMemcpyDeviceToHost, stream_.get()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::CheckSampleOutput(absl::Span<const int32_t> slots,
                                                const SampleOutput& out,
                                                absl::string_view what) const {
  bool logprobs = false;
  for (int32_t slot : slots) {
    if (!sampling_ready_[slot]) return NoSamplerError(SlotId{slot}, what);
    logprobs = logprobs || top_logprobs_[slot] > 0;
  }
  return linserve::CheckSampleOutput(slots.size(), logprobs, out, what);
}

absl::StatusOr<bool> CudaBackendImpl::EnqueueSample() {
  cudaStream_t s = stream_.get();
  const int rows = static_cast<int>(sample_slots_.size());
  cuda::SampleArgs sample;
  sample.logits = logits_;
  sample.slots = slots_dev_;
  sample.state = sampler_;
  sample.rows = rows;
  sample.vocab = config_.vocab_size;
  sample.tokens = samples_dev_.tokens;
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchSample(s, sample));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(samples_host_.tokens, samples_dev_.tokens,
                                                rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                                s));
  bool logprobs = false;
  for (int i = 0; i < rows; ++i) {
    samples_host_.top_n[i] = top_logprobs_[sample_slots_[i]];
    logprobs = logprobs || samples_host_.top_n[i] > 0;
  }
  if (!logprobs) return false;
  // The sample kernel leaves logits_ as the LM head wrote it: before penalties and temperature.
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(samples_dev_.top_n, samples_host_.top_n,
                                                rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                                                s));
  cuda::TopLogprobsArgs args;
  args.logits = logits_;
  args.tokens = samples_dev_.tokens;
  args.top_n = samples_dev_.top_n;
  args.rows = rows;
  args.vocab = config_.vocab_size;
  args.max_top = kMaxTopLogprobs;
  args.logprobs = samples_dev_.logprobs;
  args.top_ids = samples_dev_.top_ids;
  args.top_logprobs = samples_dev_.top_logprobs;
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchTopLogprobs(s, args));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(samples_host_.logprobs, samples_dev_.logprobs,
                                                rows * sizeof(float), cudaMemcpyDeviceToHost, s));
  const size_t top = static_cast<size_t>(rows) * kMaxTopLogprobs;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(samples_host_.top_ids, samples_dev_.top_ids,
                                                top * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(samples_host_.top_logprobs,
                                                samples_dev_.top_logprobs, top * sizeof(float),
                                                cudaMemcpyDeviceToHost, s));
  return true;
}

void CudaBackendImpl::CopySamples(bool logprobs, const SampleOutput& out) const {
  const size_t rows = sample_slots_.size();
  std::copy(samples_host_.tokens, samples_host_.tokens + rows, out.tokens.begin());
  if (!logprobs) return;
  for (size_t i = 0; i < rows; ++i) {
    const int32_t n = samples_host_.top_n[i];
    if (n == 0) continue;
    out.logprobs[i] = samples_host_.logprobs[i];
    for (int32_t k = 0; k < n; ++k) {
      const size_t at = i * kMaxTopLogprobs + static_cast<size_t>(k);
      out.top_logprobs[at] = {samples_host_.top_ids[at], samples_host_.top_logprobs[at]};
    }
  }
}

absl::Status CudaBackendImpl::FinishLaunched() const {
  if (!launched_.has_value() || launched_->outcome.has_value()) return absl::OkStatus();
  absl::Status outcome = Synchronize();
  if (outcome.ok()) CopySamples(launched_->logprobs, launched_->out);
  launched_->outcome = outcome;
  return outcome;
}

absl::Status CudaBackendImpl::LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                                    const SampleOutput& out) {
  if (launched_.has_value()) {
    return absl::FailedPreconditionError(
        "LaunchDecodeAndSample: a step is in flight; collect it first");
  }
  LINSERVE_RETURN_IF_ERROR(pool_.CheckBatch(batch));
  sample_slots_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) sample_slots_[i] = batch[i].slot.value;
  LINSERVE_RETURN_IF_ERROR(CheckSampleOutput(sample_slots_, out, "LaunchDecodeAndSample"));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(RunDecodeStep(batch));
  absl::StatusOr<bool> logprobs = EnqueueSample();
  if (!logprobs.ok()) return logprobs.status();
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  launched_ = Launched{.out = out, .logprobs = *logprobs, .outcome = std::nullopt};
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::CollectSamples() {
  if (!launched_.has_value()) {
    return absl::FailedPreconditionError("CollectSamples: no step is in flight");
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  absl::Status outcome = FinishLaunched();
  launched_.reset();
  return outcome;
}

absl::Status CudaBackendImpl::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                              const SampleOutput& out) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckBatch(batch));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  sample_slots_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) sample_slots_[i] = batch[i].slot.value;
  LINSERVE_RETURN_IF_ERROR(CheckSampleOutput(sample_slots_, out, "DecodeAndSample"));
  LINSERVE_RETURN_IF_ERROR(RunDecodeStep(batch));
  absl::StatusOr<bool> logprobs = EnqueueSample();
  if (!logprobs.ok()) return logprobs.status();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  CopySamples(*logprobs, out);
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                               const SampleOutput& out) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckPrefill(slot, tokens, 0));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  sample_slots_.assign(1, slot.value);
  LINSERVE_RETURN_IF_ERROR(CheckSampleOutput(sample_slots_, out, "PrefillAndSample"));
  LINSERVE_RETURN_IF_ERROR(RunPrefill(slot, tokens, nullptr, nullptr, /*last_on_device=*/true));
  // RunPrefill's last segment left slots_dev_[0] == slot.
  absl::StatusOr<bool> logprobs = EnqueueSample();
  if (!logprobs.ok()) return logprobs.status();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  CopySamples(*logprobs, out);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::StartSampling(SlotId slot, const SamplingParams& params,
                                            int32_t top_logprobs,
                                            absl::Span<const TokenId> observed) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "StartSampling: slot"));
  LINSERVE_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("StartSampling: top_logprobs = ", top_logprobs,
                                                   " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  for (size_t i = 0; i < observed.size(); ++i) {
    LINSERVE_RETURN_IF_ERROR(
        pool_.CheckToken(observed[i], absl::StrCat("StartSampling: observed[", i, "]")));
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());  // the observed tokens go through host_rows_
  cudaStream_t s = stream_.get();
  cuda::DeviceSamplingParams device_params;
  device_params.temperature = params.temperature;
  device_params.top_k = params.top_k;
  device_params.top_p = params.top_p;
  device_params.min_p = params.min_p;
  device_params.repetition_penalty = params.repetition_penalty;
  device_params.presence_penalty = params.presence_penalty;
  device_params.frequency_penalty = params.frequency_penalty;
  auto rng = std::make_unique<cuda::Mt19937_64>();
  rng->Seed(params.seed);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sampler_.params + slot.value, &device_params,
                                                sizeof(device_params), cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      sampler_.rngs + slot.value, rng.get(), sizeof(cuda::Mt19937_64), cudaMemcpyHostToDevice, s));
  // The observed tokens go through the pinned token buffer, rows_ at a time, and add to the
  // counts the slot already has.
  for (size_t first = 0; first < observed.size(); first += static_cast<size_t>(rows_)) {
    const int n = static_cast<int>(std::min<size_t>(rows_, observed.size() - first));
    LINSERVE_RETURN_IF_ERROR(Synchronize());  // the previous piece has left the pinned buffer
    std::copy_n(observed.begin() + first, n, host_rows_.tokens);
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tokens_dev_, host_rows_.tokens,
                                                  n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    LINSERVE_RETURN_IF_ERROR(cuda::LaunchCountTokens(s, tokens_dev_, n, config_.vocab_size,
                                                     slot.value, sampler_.seen_counts));
  }
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  sampling_ready_[slot.value] = 1;
  top_logprobs_[slot.value] = top_logprobs;
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "SetSeenCounts: slot"));
  dense_counts_.assign(static_cast<size_t>(config_.vocab_size), 0);
  for (size_t i = 0; i < counts.size(); ++i) {
    LINSERVE_RETURN_IF_ERROR(
        pool_.CheckToken(counts[i].token, absl::StrCat("SetSeenCounts: counts[", i, "].token")));
    if (counts[i].count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SetSeenCounts: counts[", i, "].count = ", counts[i].count, " is negative"));
    }
    // The device counts are int32: a count past that saturates, which no penalty can tell apart.
    const int64_t sum = dense_counts_[counts[i].token] + counts[i].count;
    dense_counts_[counts[i].token] =
        static_cast<int32_t>(std::min<int64_t>(sum, std::numeric_limits<int32_t>::max()));
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      SlotCounts(slot.value), dense_counts_.data(), dense_counts_.size() * sizeof(int32_t),
      cudaMemcpyHostToDevice, stream_.get()));
  return Synchronize();
}

absl::Status CudaBackendImpl::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                      absl::Span<float> logits) {
  LINSERVE_RETURN_IF_ERROR(
      pool_.CheckPrefill(slot, tokens, static_cast<int64_t>(logits.size())));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  const bool all_logits = static_cast<int64_t>(logits.size()) == n * vocab;
  const bool last_logits = static_cast<int64_t>(logits.size()) == vocab;
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  return RunPrefill(slot, tokens, all_logits ? logits.data() : nullptr,
                    last_logits ? logits.data() : nullptr, /*last_on_device=*/false);
}

absl::Status CudaBackendImpl::RunPrefill(SlotId slot, absl::Span<const TokenId> tokens,
                                         float* all_logits, float* last_logits,
                                         bool last_on_device) {
  cudaStream_t s = stream_.get();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  const int64_t d = config_.d_model;
  const int64_t head_rows = options_.max_batch_size;  // rows of logits_
  const int64_t start = pool_.position(slot);

  for (int64_t first = 0; first < n; first += segment_) {
    const int rows = static_cast<int>(std::min<int64_t>(segment_, n - first));
    for (int i = 0; i < rows; ++i) {
      host_rows_.tokens[i] = tokens[first + i];
      host_rows_.positions[i] = start + first + i;
      host_rows_.slots[i] = slot.value;
    }
    LINSERVE_RETURN_IF_ERROR(EnqueueRowInputs(rows));
    const PrefillPiece piece{.slot = slot.value, .first_row = 0, .rows = rows};
    LINSERVE_RETURN_IF_ERROR(EnqueueLayers(rows, {&piece, 1}));
    if (all_logits != nullptr) {
      for (int64_t r = 0; r < rows; r += head_rows) {
        const int64_t m = std::min<int64_t>(head_rows, rows - r);
        LINSERVE_RETURN_IF_ERROR(
            gemm_->Linear(s, dtype_, RowPtr(xt_, r, d), head_, logits_, m, vocab, d));
        LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(all_logits + (first + r) * vocab, logits_,
                                                      m * vocab * sizeof(float),
                                                      cudaMemcpyDeviceToHost, s));
      }
    } else if ((last_logits != nullptr || last_on_device) && first + rows == n) {
      LINSERVE_RETURN_IF_ERROR(
          gemm_->Linear(s, dtype_, RowPtr(xt_, rows - 1, d), head_, logits_, 1, vocab, d));
      if (last_logits != nullptr) {
        LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(last_logits, logits_, vocab * sizeof(float),
                                                      cudaMemcpyDeviceToHost, s));
      }
    }
    // The pinned row inputs are refilled by the next segment.
    LINSERVE_RETURN_IF_ERROR(Synchronize());
  }
  pool_.set_position(slot, start + n);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::PrefillBatch(absl::Span<const PrefillItem> batch,
                                           const SampleOutput& out) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckPrefillBatch(batch));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  sample_slots_.clear();
  for (const PrefillItem& item : batch) {
    if (item.sample) sample_slots_.push_back(item.slot.value);
  }
  LINSERVE_RETURN_IF_ERROR(CheckSampleOutput(sample_slots_, out, "PrefillBatch"));
  LINSERVE_RETURN_IF_ERROR(RunPrefillBatch(batch));
  if (sample_slots_.empty()) return absl::OkStatus();
  // The sampler reads each row's slot from slots_dev_ (the pinned inputs are free again).
  std::copy(sample_slots_.begin(), sample_slots_.end(), host_rows_.slots);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots_dev_, host_rows_.slots,
                                                sample_slots_.size() * sizeof(int32_t),
                                                cudaMemcpyHostToDevice, stream_.get()));
  absl::StatusOr<bool> logprobs = EnqueueSample();
  if (!logprobs.ok()) return logprobs.status();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  CopySamples(*logprobs, out);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::RunPrefillBatch(absl::Span<const PrefillItem> batch) {
  cudaStream_t s = stream_.get();
  const int64_t vocab = config_.vocab_size;
  const int64_t d = config_.d_model;
  const int64_t chunk = options_.prefill_chunk_size;
  size_t item = 0;
  int64_t fed = 0;         // tokens of batch[item] in earlier passes
  int64_t logits_row = 0;  // the next sampling item's row of logits_
  while (item < batch.size()) {
    // Fill one pass with the next items' tokens, in order.
    pieces_.clear();
    pending_head_rows_.clear();
    int rows = 0;
    while (item < batch.size()) {
      const PrefillItem& it = batch[item];
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      const int64_t position = pool_.position(it.slot) + fed;
      int64_t take = std::min<int64_t>(n - fed, segment_ - rows);
      if (fed + take < n) {
        // The item goes on in the next pass: cut at a chunk boundary (segment_ is a multiple
        // of the chunk, so a fresh pass always takes some).
        take = (fed + take) / chunk * chunk - fed;
        if (take <= 0) break;
      }
      for (int64_t r = 0; r < take; ++r) {
        host_rows_.tokens[rows + r] = it.tokens[fed + r];
        host_rows_.positions[rows + r] = position + r;
        host_rows_.slots[rows + r] = it.slot.value;
      }
      pieces_.push_back({it.slot.value, rows, static_cast<int>(take)});
      rows += static_cast<int>(take);
      fed += take;
      if (fed < n) break;
      if (it.sample) pending_head_rows_.push_back(rows - 1);
      ++item;
      fed = 0;
    }
    LINSERVE_RETURN_IF_ERROR(EnqueueRowInputs(rows));
    LINSERVE_RETURN_IF_ERROR(EnqueueLayers(rows, pieces_));
    // The LM head of each sampling item's last row, into the next row of logits_.
    for (int row : pending_head_rows_) {
      LINSERVE_RETURN_IF_ERROR(gemm_->Linear(s, dtype_, RowPtr(xt_, row, d), head_,
                                             logits_ + logits_row * vocab, 1, vocab, d));
      ++logits_row;
    }
    // The pinned row inputs are refilled by the next pass.
    LINSERVE_RETURN_IF_ERROR(Synchronize());
  }
  for (const PrefillItem& it : batch) {
    pool_.Advance(it.slot, static_cast<int64_t>(it.tokens.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(
    const Model& model, const BackendOptions& options, const CudaBackendOptions& cuda_options) {
  const ModelConfig& config = model.config;
  const int64_t slot_bytes = config.StateFloatsPerSlot() * static_cast<int64_t>(sizeof(float));
  absl::StatusOr<int32_t> capacity =
      SlotCapacity(config, options,
                   {.max_prefill_chunk_size = cuda::kMaxPrefillChunk, .max_batch_size = kMaxBatch});
  if (!capacity.ok()) return capacity.status();

  std::string reason;
  absl::StatusOr<int> devices = cuda::CudaDeviceCount(&reason);
  if (!devices.ok()) return devices.status();
  if (*devices == 0) {
    return absl::UnavailableError(absl::StrCat("CUDA backend: no CUDA device (", reason, ")"));
  }
  if (cuda_options.device < 0 || cuda_options.device >= *devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions.device = ", cuda_options.device, " is outside [0, ",
                     *devices - 1, "] (", *devices, " CUDA devices)"));
  }
  auto backend = std::make_unique<CudaBackendImpl>(config, options, cuda_options, *capacity);
  LINSERVE_RETURN_IF_ERROR(backend->Initialize(model));
  const CudaMemoryUse use = backend->memory_use();
  spdlog::info(
      "cuda backend: {}; weights {} ({}), {} slots of {} state ({}), sampler {}, activations {}",
      backend->device_description(), FormatBytes(use.weights_bytes),
      std::string(cuda::DTypeName(ToDType(options.weight_precision))), *capacity,
      FormatBytes(slot_bytes), FormatBytes(use.state_pool_bytes), FormatBytes(use.sampler_bytes),
      FormatBytes(use.workspace_bytes));
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace linserve
