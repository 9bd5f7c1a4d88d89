#include "model/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/threads.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr int32_t kMaxChunk = 4096;
constexpr int32_t kMaxThreads = 1024;
constexpr int32_t kMaxBatch = 1 << 16;

cpu::FeatureMap ToKernel(FeatureMap m) {
  switch (m) {
    case FeatureMap::kEluPlusOne:
      return cpu::FeatureMap::kEluPlusOne;
    case FeatureMap::kRelu:
      return cpu::FeatureMap::kRelu;
    case FeatureMap::kExp:
      return cpu::FeatureMap::kExp;
    case FeatureMap::kFavorPlus:
      return cpu::FeatureMap::kFavorPlus;
  }
  return cpu::FeatureMap::kEluPlusOne;
}

cpu::Activation ToKernel(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return cpu::Activation::kGelu;
    case Activation::kGeluTanh:
      return cpu::Activation::kGeluTanh;
    case Activation::kRelu:
      return cpu::Activation::kRelu;
  }
  return cpu::Activation::kGelu;
}

cpu::PackedMatrix Pack(const Tensor& t) {
  return cpu::PackedMatrix::Pack(t.data.data(), t.shape[0], t.shape[1]);
}

const float* OrNull(const Tensor& t) { return t.empty() ? nullptr : t.data.data(); }

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Model& model,
                                                               const BackendOptions& options) {
  absl::StatusOr<int32_t> capacity = SlotCapacity(
      model.config, options, {.max_prefill_chunk_size = kMaxChunk, .max_batch_size = kMaxBatch});
  if (!capacity.ok()) return capacity.status();
  if (options.num_threads < 0 || options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("BackendOptions.num_threads = ",
                                                   options.num_threads, " is outside [0, ",
                                                   kMaxThreads, "]"));
  }
  const int threads = cpu::ResolveNumThreads(options.num_threads);
  // OpenBLAS is only called from inside our parallel loops (one head per thread).
  cpu::SetBlasThreads(1);
  auto backend =
      std::unique_ptr<CpuBackend>(new CpuBackend(model, options, *capacity, threads));
  spdlog::info("cpu backend: {} slots of {} KiB state, {} threads, prefill chunk {}", *capacity,
               model.config.StateFloatsPerSlot() * 4 / 1024, threads, options.prefill_chunk_size);
  return backend;
}

CpuBackend::CpuBackend(const Model& model, const BackendOptions& options, int32_t capacity,
                       int threads)
    : model_(model),
      config_(model.config),
      options_(options),
      threads_(threads),
      state_floats_(model.config.StateFloatsPerSlot()),
      max_rows_(std::max(options.max_batch_size, options.prefill_chunk_size)),
      shape_{model.config.n_heads, model.config.feature_dim, model.config.head_dim,
             static_cast<float>(model.config.attention_eps)},
      feature_map_(ToKernel(model.config.feature_map)),
      activation_(ToKernel(model.config.activation)),
      sinusoid_(model.config.position == PositionEmbedding::kSinusoidal
                    ? cpu::SinusoidalDenominators(model.config.d_model)
                    : std::vector<double>()),
      pool_(model.config, options, capacity),
      states_(static_cast<int64_t>(capacity) * model.config.StateFloatsPerSlot()),
      sampling_(capacity, model.config.vocab_size, threads) {
  const ModelWeights& w = model.weights;
  layers_.reserve(w.layers.size());
  for (const LayerWeights& l : w.layers) {
    layers_.push_back(PackedLayer{Pack(l.q_weight), Pack(l.k_weight), Pack(l.v_weight),
                                  Pack(l.o_weight), Pack(l.fc1_weight), Pack(l.fc2_weight)});
  }
  head_ = Pack(w.head(config_));

  const int64_t rows = max_rows_;
  const int64_t d = config_.d_model;
  const int64_t hd = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const int64_t hf = static_cast<int64_t>(config_.n_heads) * config_.feature_dim;
  x_ = cpu::FloatBuffer(rows * d);
  h_ = cpu::FloatBuffer(rows * d);
  q_ = cpu::FloatBuffer(rows * hd);
  k_ = cpu::FloatBuffer(rows * hd);
  v_ = cpu::FloatBuffer(rows * hd);
  phi_q_ = cpu::FloatBuffer(rows * hf);
  phi_k_ = cpu::FloatBuffer(rows * hf);
  attn_ = cpu::FloatBuffer(rows * hd);
  ff_ = cpu::FloatBuffer(rows * config_.d_ff);
  chunk_scratch_ = cpu::FloatBuffer(
      cpu::LinearAttentionChunkScratchFloats(options.prefill_chunk_size, threads));
  decode_slots_.resize(static_cast<size_t>(options.max_batch_size));
  layer_states_.resize(static_cast<size_t>(options.max_batch_size));
  sample_slots_.resize(static_cast<size_t>(options.max_batch_size));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(model, options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

// ---- Slots -------------------------------------------------------------------------------

void CpuBackend::ClearSlot(SlotId slot) {
  pool_.set_position(slot, 0);
  std::fill_n(SlotState(slot.value), state_floats_, 0.0f);
  sampling_.Clear(slot);
}

absl::StatusOr<SlotId> CpuBackend::AllocateSlot() {
  absl::StatusOr<SlotId> slot = pool_.Allocate();
  if (slot.ok()) ClearSlot(*slot);
  return slot;
}

void CpuBackend::FreeSlot(SlotId slot) { pool_.Free(slot); }

absl::Status CpuBackend::ResetSlot(SlotId slot) {
  if (absl::Status s = pool_.CheckAllocated(slot, "ResetSlot: slot"); !s.ok()) return s;
  ClearSlot(slot);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopySlot(SlotId from, SlotId to) {
  if (absl::Status s = pool_.CheckAllocated(from, "CopySlot: from"); !s.ok()) return s;
  if (absl::Status s = pool_.CheckAllocated(to, "CopySlot: to"); !s.ok()) return s;
  if (from == to) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopySlot: from and to are the same slot (", from.value, ")"));
  }
  std::memcpy(SlotState(to.value), SlotState(from.value),
              static_cast<size_t>(state_floats_) * sizeof(float));
  pool_.set_position(to, pool_.position(from));
  sampling_.Copy(from, to);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CpuBackend::SlotPosition(SlotId slot) const {
  if (absl::Status s = pool_.CheckAllocated(slot, "SlotPosition: slot"); !s.ok()) return s;
  return pool_.position(slot);
}

absl::Status CpuBackend::ReadSlot(SlotId slot, StateBlob& out) const {
  if (absl::Status s = pool_.CheckAllocated(slot, "ReadSlot: slot"); !s.ok()) return s;
  out.position = pool_.position(slot);
  out.state.assign(SlotState(slot.value), SlotState(slot.value) + state_floats_);
  return absl::OkStatus();
}

absl::Status CpuBackend::WriteSlot(SlotId slot, const StateBlob& in) {
  if (absl::Status s = pool_.CheckWrite(slot, in); !s.ok()) return s;
  std::copy(in.state.begin(), in.state.end(), SlotState(slot.value));
  pool_.set_position(slot, in.position);
  sampling_.Clear(slot);
  return absl::OkStatus();
}

// ---- Sampling ----------------------------------------------------------------------------

absl::Status CpuBackend::StartSampling(SlotId slot, const SamplingParams& params,
                                       int32_t top_logprobs, absl::Span<const TokenId> observed) {
  if (absl::Status s = pool_.CheckAllocated(slot, "StartSampling: slot"); !s.ok()) return s;
  return sampling_.Start(slot, params, top_logprobs, observed);
}

absl::Status CpuBackend::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  if (absl::Status s = pool_.CheckAllocated(slot, "SetSeenCounts: slot"); !s.ok()) return s;
  return sampling_.SetSeenCounts(slot, counts);
}

float* CpuBackend::SampleLogits() {
  if (sample_logits_.size() == 0) {
    sample_logits_ =
        cpu::FloatBuffer(static_cast<int64_t>(options_.max_batch_size) * config_.vocab_size);
  }
  return sample_logits_.data();
}

absl::Status CpuBackend::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                         const SampleOutput& out) {
  if (absl::Status s = pool_.CheckBatch(batch); !s.ok()) return s;
  for (size_t i = 0; i < batch.size(); ++i) sample_slots_[i] = batch[i].slot;
  const absl::Span<const SlotId> slots(sample_slots_.data(), batch.size());
  if (absl::Status s = sampling_.CheckOutput(slots, out, "DecodeAndSample"); !s.ok()) return s;
  float* logits = SampleLogits();
  RunDecode(batch, logits);
  sampling_.SampleRows(slots, logits, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                          const SampleOutput& out) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, 0); !s.ok()) return s;
  if (absl::Status s = sampling_.CheckOutput({&slot, 1}, out, "PrefillAndSample"); !s.ok()) {
    return s;
  }
  float* logits = SampleLogits();
  RunPrefill(slot, tokens, /*all_logits=*/false, /*last_logits=*/true, logits);
  sampling_.SampleRows({&slot, 1}, logits, out);
  return absl::OkStatus();
}

// ---- Compute -----------------------------------------------------------------------------

void CpuBackend::Embed(int row, TokenId token, int64_t position) {
  const int64_t d = config_.d_model;
  const float* e = model_.weights.token_embedding.data.data() + static_cast<int64_t>(token) * d;
  float* x = x_.data() + row * d;
  std::copy(e, e + d, x);
  switch (config_.position) {
    case PositionEmbedding::kLearned: {
      const float* p = model_.weights.position_embedding.data.data() + position * d;
      for (int64_t i = 0; i < d; ++i) x[i] += p[i];
      break;
    }
    case PositionEmbedding::kSinusoidal:
      cpu::AddSinusoidalPosition(position, sinusoid_, x);
      break;
    case PositionEmbedding::kNone:
      break;
  }
}

void CpuBackend::Attention(int layer, int rows, int32_t chunk_slot) {
  const int64_t layer_offset = layer * shape_.StateFloatsPerLayer();
  // A chunk of one token is a decode step: the recurrent kernel skips the chunked form's GEMM
  // calls and gives bitwise what Decode would.
  if (chunk_slot >= 0 && rows == 1) {
    layer_states_[0] = SlotState(chunk_slot) + layer_offset;
    cpu::LinearAttentionDecode(shape_, 1, phi_q_.data(), phi_k_.data(), v_.data(),
                               layer_states_.data(), attn_.data(), threads_);
    return;
  }
  if (chunk_slot >= 0) {
    cpu::LinearAttentionChunk(shape_, rows, phi_q_.data(), phi_k_.data(), v_.data(),
                              SlotState(chunk_slot) + layer_offset, attn_.data(),
                              chunk_scratch_.data(), threads_);
    return;
  }
  for (int i = 0; i < rows; ++i) layer_states_[i] = SlotState(decode_slots_[i]) + layer_offset;
  cpu::LinearAttentionDecode(shape_, rows, phi_q_.data(), phi_k_.data(), v_.data(),
                             layer_states_.data(), attn_.data(), threads_);
}

void CpuBackend::RunLayers(int rows, int32_t chunk_slot) {
  using cpu::Linear;
  using cpu::LinearOutput;
  const int64_t d = config_.d_model;
  const int64_t hd = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const int64_t ff = config_.d_ff;
  const float ln_eps = static_cast<float>(config_.layer_norm_eps);
  const bool pre = config_.norm == NormPlacement::kPre;
  const cpu::Activation none = cpu::Activation::kNone;
  float* x = x_.data();
  float* h = h_.data();

  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& w = model_.weights.layers[l];
    const PackedLayer& p = layers_[l];
    // Attention block; its input is LN1(x) (pre-norm) or x itself (post-norm).
    const float* in = x;
    if (pre) {
      cpu::LayerNorm(x, rows, d, w.ln1_weight.data.data(), w.ln1_bias.data.data(), ln_eps, h);
      in = h;
    }
    Linear(in, rows, d, p.q, OrNull(w.q_bias), none, LinearOutput::kStore, q_.data(), hd, threads_);
    Linear(in, rows, d, p.k, OrNull(w.k_bias), none, LinearOutput::kStore, k_.data(), hd, threads_);
    Linear(in, rows, d, p.v, OrNull(w.v_bias), none, LinearOutput::kStore, v_.data(), hd, threads_);
    const float* favor = OrNull(w.favor_projection);
    const int64_t vectors = static_cast<int64_t>(rows) * config_.n_heads;
    cpu::ApplyFeatureMap(feature_map_, q_.data(), vectors, config_.head_dim, favor,
                         config_.feature_dim, phi_q_.data());
    cpu::ApplyFeatureMap(feature_map_, k_.data(), vectors, config_.head_dim, favor,
                         config_.feature_dim, phi_k_.data());
    Attention(static_cast<int>(l), rows, chunk_slot);
    Linear(attn_.data(), rows, hd, p.o, OrNull(w.o_bias), none, LinearOutput::kAccumulate, x, d,
           threads_);
    if (!pre) {
      cpu::LayerNorm(x, rows, d, w.ln1_weight.data.data(), w.ln1_bias.data.data(), ln_eps, x);
    }
    // Feed-forward block.
    in = x;
    if (pre) {
      cpu::LayerNorm(x, rows, d, w.ln2_weight.data.data(), w.ln2_bias.data.data(), ln_eps, h);
      in = h;
    }
    Linear(in, rows, d, p.fc1, OrNull(w.fc1_bias), activation_, LinearOutput::kStore, ff_.data(),
           ff, threads_);
    Linear(ff_.data(), rows, ff, p.fc2, OrNull(w.fc2_bias), none, LinearOutput::kAccumulate, x, d,
           threads_);
    if (!pre) {
      cpu::LayerNorm(x, rows, d, w.ln2_weight.data.data(), w.ln2_bias.data.data(), ln_eps, x);
    }
  }
}

void CpuBackend::Head(int first, int rows, float* logits) {
  const int64_t d = config_.d_model;
  const float* in = x_.data() + first * d;
  if (config_.norm == NormPlacement::kPre) {
    cpu::LayerNorm(in, rows, d, model_.weights.final_norm_weight.data.data(),
                   model_.weights.final_norm_bias.data.data(),
                   static_cast<float>(config_.layer_norm_eps), h_.data());
    in = h_.data();
  }
  cpu::Linear(in, rows, d, head_, nullptr, cpu::Activation::kNone, cpu::LinearOutput::kStore,
              logits, config_.vocab_size, threads_);
}

absl::Status CpuBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                 absl::Span<float> logits) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, static_cast<int64_t>(logits.size()));
      !s.ok()) {
    return s;
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  RunPrefill(slot, tokens, static_cast<int64_t>(logits.size()) == n * vocab,
             static_cast<int64_t>(logits.size()) == vocab, logits.data());
  return absl::OkStatus();
}

void CpuBackend::RunPrefill(SlotId slot, absl::Span<const TokenId> tokens, bool all_logits,
                            bool last_logits, float* logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  const int64_t start = pool_.position(slot);
  const int64_t chunk = options_.prefill_chunk_size;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int rows = static_cast<int>(std::min(chunk, n - c0));
    for (int r = 0; r < rows; ++r) Embed(r, tokens[c0 + r], start + c0 + r);
    RunLayers(rows, slot.value);
    if (all_logits) {
      Head(0, rows, logits + c0 * vocab);
    } else if (last_logits && c0 + rows == n) {
      Head(rows - 1, 1, logits);
    }
  }
  pool_.set_position(slot, start + n);
}

absl::Status CpuBackend::Decode(absl::Span<const DecodeItem> batch, absl::Span<float> logits) {
  if (absl::Status s = pool_.CheckBatch(batch); !s.ok()) return s;
  const int64_t vocab = config_.vocab_size;
  if (static_cast<int64_t>(logits.size()) != static_cast<int64_t>(batch.size()) * vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("Decode: logits has ", logits.size(), " floats; expected batch.size() × ",
                     "vocab_size = ", batch.size() * vocab));
  }
  RunDecode(batch, logits.data());
  return absl::OkStatus();
}

void CpuBackend::RunDecode(absl::Span<const DecodeItem> batch, float* logits) {
  const int rows = static_cast<int>(batch.size());
  for (int i = 0; i < rows; ++i) {
    decode_slots_[i] = batch[i].slot.value;
    Embed(i, batch[i].token, pool_.position(batch[i].slot));
  }
  RunLayers(rows, -1);
  Head(0, rows, logits);
  for (int i = 0; i < rows; ++i) pool_.Advance(batch[i].slot, 1);
}

}  // namespace linserve
