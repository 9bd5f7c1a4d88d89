#include "model/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/threads.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr int32_t kMaxChunk = 4096;
constexpr int32_t kMaxThreads = 1024;
constexpr int32_t kMaxBatch = 1 << 16;

}  // namespace

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const Model& model,
                                                               const BackendOptions& requested) {
  absl::StatusOr<WeightPrecision> precision =
      CpuWeightPrecision(requested.weight_precision, model.config.weight_format);
  if (!precision.ok()) return precision.status();
  if (absl::Status s = CheckCpuStatePrecision(requested.state_precision); !s.ok()) return s;
  BackendOptions options = requested;
  options.weight_precision = *precision;
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
  if (model.config.weight_format == WeightFileFormat::kInt8 &&
      options.weight_precision == WeightPrecision::kFp32) {
    spdlog::info("cpu backend: the model file stores int8 weights; widening them to fp32");
  }
  spdlog::info(
      "cpu backend: {} weights ({} kernels), {} slots of {} KiB state, {} threads, prefill "
      "chunk {}",
      WeightPrecisionName(options.weight_precision), cpu::CpuIsaName(cpu::ChosenCpuIsa()),
      *capacity,
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
      max_rows_(std::max({options.max_batch_size, kPrefillPassRows, options.prefill_chunk_size})),
      sinusoid_(model.config.position == PositionEmbedding::kSinusoidal
                    ? cpu::SinusoidalDenominators(model.config.d_model)
                    : std::vector<double>()),
      pool_(model.config, options, capacity),
      states_(static_cast<int64_t>(capacity) * model.config.StateFloatsPerSlot()),
      sampling_(capacity, model.config.vocab_size, threads) {
  const CpuLayerContext context{.model = model,
                                .options = options,
                                .threads = threads,
                                .max_rows = max_rows_,
                                .workspace = workspace_};
  layers_ = CreateCpuLayers(context);
  workspace_.Allocate();
  head_ = PackWeights(context, model.weights.head(config_));
  x_ = cpu::FloatBuffer(int64_t{max_rows_} * config_.d_model);
  h_ = cpu::FloatBuffer(int64_t{max_rows_} * config_.d_model);
  decode_slots_.resize(static_cast<size_t>(options.max_batch_size));
  sample_slots_.resize(static_cast<size_t>(options.max_batch_size));
  pieces_.reserve(static_cast<size_t>(options.max_batch_size));
  head_rows_.reserve(static_cast<size_t>(options.max_batch_size));
  prefill_slots_.reserve(static_cast<size_t>(options.max_batch_size));
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
  sample_masks_.resize(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    sample_slots_[i] = batch[i].slot;
    sample_masks_[i] = batch[i].allowed_tokens;
  }
  const absl::Span<const SlotId> slots(sample_slots_.data(), batch.size());
  if (absl::Status s = sampling_.CheckOutput(slots, sample_masks_, out, "DecodeAndSample");
      !s.ok()) {
    return s;
  }
  float* logits = SampleLogits();
  RunDecode(batch, logits);
  sampling_.SampleRows(slots, sample_masks_, logits, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                          const SampleOutput& out, const uint32_t* allowed_tokens) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, 0); !s.ok()) return s;
  if (absl::Status s =
          sampling_.CheckOutput({&slot, 1}, {&allowed_tokens, 1}, out, "PrefillAndSample");
      !s.ok()) {
    return s;
  }
  float* logits = SampleLogits();
  const PrefillItem item{.slot = slot, .tokens = tokens, .sample = true};
  RunPrefill({&item, 1}, /*all_logits=*/false, logits);
  sampling_.SampleRows({&slot, 1}, {&allowed_tokens, 1}, logits, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::PrefillBatch(absl::Span<const PrefillItem> batch,
                                      const SampleOutput& out) {
  if (absl::Status s = pool_.CheckPrefillBatch(batch); !s.ok()) return s;
  prefill_slots_.clear();
  prefill_masks_.clear();
  for (const PrefillItem& item : batch) {
    if (!item.sample) continue;
    prefill_slots_.push_back(item.slot);
    prefill_masks_.push_back(item.allowed_tokens);
  }
  if (absl::Status s = sampling_.CheckOutput(prefill_slots_, prefill_masks_, out, "PrefillBatch");
      !s.ok()) {
    return s;
  }
  float* logits = SampleLogits();
  RunPrefill(batch, /*all_logits=*/false, logits);
  if (!prefill_slots_.empty()) sampling_.SampleRows(prefill_slots_, prefill_masks_, logits, out);
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

void CpuBackend::RunLayers(int rows, bool prefill) {
  const bool pre = config_.norm == NormPlacement::kPre;
  const CpuPass pass{.rows = rows,
                     .prefill = prefill,
                     .pieces = pieces_,
                     .decode_slots = {decode_slots_.data(), static_cast<size_t>(rows)},
                     .states = states_.data(),
                     .state_floats = state_floats_};
  float* x = x_.data();
  float* h = h_.data();
  for (CpuLayer& layer : layers_.layers) {
    // Mixer block; its input is norm1(x) (pre-norm) or x itself (post-norm).
    if (pre) {
      layer.norm1->Apply(x, rows, h);
      layer.mixer->Forward(h, pass, x);
    } else {
      layer.mixer->Forward(x, pass, x);
      layer.norm1->Apply(x, rows, x);
    }
    // MLP block (none with the MLP kind "none").
    if (layer.mlp == nullptr) continue;
    if (pre) {
      layer.norm2->Apply(x, rows, h);
      layer.mlp->Forward(h, rows, x);
    } else {
      layer.mlp->Forward(x, rows, x);
      layer.norm2->Apply(x, rows, x);
    }
  }
}

void CpuBackend::Head(int first, int rows, float* logits) {
  const int64_t d = config_.d_model;
  const float* in = x_.data() + first * d;
  if (layers_.final_norm != nullptr) {
    layers_.final_norm->Apply(in, rows, h_.data());
    in = h_.data();
  }
  cpu::Linear(in, rows, d, head_, nullptr, cpu::Activation::kNone, cpu::LinearOutput::kStore,
              logits, config_.vocab_size, threads_);
}

void CpuBackend::HeadRows(absl::Span<const int> rows, float* logits) {
  const int64_t d = config_.d_model;
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* x = x_.data() + rows[i] * d;
    float* h = h_.data() + static_cast<int64_t>(i) * d;
    if (layers_.final_norm != nullptr) {
      layers_.final_norm->Apply(x, 1, h);
    } else {
      std::copy(x, x + d, h);
    }
  }
  cpu::Linear(h_.data(), static_cast<int64_t>(rows.size()), d, head_, nullptr,
              cpu::Activation::kNone, cpu::LinearOutput::kStore, logits, config_.vocab_size,
              threads_);
}

absl::Status CpuBackend::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                 absl::Span<float> logits) {
  if (absl::Status s = pool_.CheckPrefill(slot, tokens, static_cast<int64_t>(logits.size()));
      !s.ok()) {
    return s;
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  const int64_t size = static_cast<int64_t>(logits.size());
  const PrefillItem item{.slot = slot, .tokens = tokens, .sample = size == vocab};
  RunPrefill({&item, 1}, /*all_logits=*/size == n * vocab, logits.data());
  return absl::OkStatus();
}

void CpuBackend::RunPrefill(absl::Span<const PrefillItem> batch, bool all_logits, float* logits) {
  const int64_t vocab = config_.vocab_size;
  const int64_t chunk = options_.prefill_chunk_size;
  size_t item = 0;
  int64_t fed = 0;         // tokens of batch[item] in earlier passes
  int64_t logits_row = 0;  // the next row of `logits`
  while (item < batch.size()) {
    // Fill one pass with the next items' tokens, in order.
    pieces_.clear();
    head_rows_.clear();
    int rows = 0;
    while (item < batch.size()) {
      const PrefillItem& it = batch[item];
      const int64_t n = static_cast<int64_t>(it.tokens.size());
      const int64_t position = pool_.position(it.slot) + fed;
      int64_t take = std::min<int64_t>(n - fed, max_rows_ - rows);
      if (fed + take < n) {
        // The item goes on in the next pass: cut at a chunk boundary. A fresh pass always
        // takes at least one token (max_rows_ >= chunk).
        take = (fed + take) / chunk * chunk - fed;
        if (take <= 0) break;
      }
      for (int64_t r = 0; r < take; ++r) {
        Embed(rows + static_cast<int>(r), it.tokens[fed + r], position + r);
      }
      pieces_.push_back({it.slot.value, rows, static_cast<int>(take)});
      rows += static_cast<int>(take);
      fed += take;
      if (fed < n) break;
      if (it.sample) head_rows_.push_back(rows - 1);
      ++item;
      fed = 0;
    }
    RunLayers(rows, /*prefill=*/true);
    if (all_logits) {
      Head(0, rows, logits + logits_row * vocab);
      logits_row += rows;
    } else if (!head_rows_.empty()) {
      HeadRows(head_rows_, logits + logits_row * vocab);
      logits_row += static_cast<int64_t>(head_rows_.size());
    }
  }
  for (const PrefillItem& it : batch) {
    pool_.Advance(it.slot, static_cast<int64_t>(it.tokens.size()));
  }
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
  RunLayers(rows, /*prefill=*/false);
  Head(0, rows, logits);
  for (int i = 0; i < rows; ++i) pool_.Advance(batch[i].slot, 1);
}

}  // namespace linserve
