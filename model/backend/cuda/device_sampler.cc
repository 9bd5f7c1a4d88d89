#include "model/backend/cuda/device_sampler.h"

#include <algorithm>
#include <limits>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/logprobs.h"
#include "kernels/cuda/mt19937_64.h"
#include "kernels/cuda/sampling.h"
#include "model/backend/slot_pool.h"
#include "model/backend/token_mask.h"

namespace linserve {

DeviceSampler::DeviceSampler(int32_t capacity, int32_t vocab, const CudaWorkspace& workspace)
    : vocab_(vocab),
      ws_(workspace),
      ready_(static_cast<size_t>(capacity), 0),
      top_logprobs_(static_cast<size_t>(capacity), 0),
      greedy_(static_cast<size_t>(capacity), 0),
      bias_counts_(static_cast<size_t>(capacity), 0),
      pending_(static_cast<size_t>(capacity)),
      arena_entries_(CountArenaEntries(vocab)) {}

namespace {

static_assert(cuda::kMaxDeviceLogitBias == kMaxLogitBias);

bool UsesPenalty(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

}  // namespace

bool DeviceSampler::StartCounts(int32_t slot, const SamplingParams& params,
                                absl::Span<const TokenId> observed) const {
  return UsesPenalty(params) ||
         static_cast<int64_t>(pending_[static_cast<size_t>(slot)].size() + observed.size()) >=
             vocab_;
}

void DeviceSampler::Forget(int32_t slot) {
  ready_[static_cast<size_t>(slot)] = 0;
  bias_counts_[static_cast<size_t>(slot)] = 0;
  pending_[static_cast<size_t>(slot)] = {};
}

absl::Status DeviceSampler::EnqueueClear(cudaStream_t stream, int32_t slot) {
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counts(slot), 0, static_cast<size_t>(vocab_) * sizeof(int32_t), stream));
  Forget(slot);
  return absl::OkStatus();
}

absl::Status DeviceSampler::EnqueueCopy(cudaStream_t s, int32_t from, int32_t to) const {
  const cuda::SamplerSlots& sampler = ws_.sampler;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counts(to), counts(from),
                                                static_cast<size_t>(vocab_) * sizeof(int32_t),
                                                cudaMemcpyDeviceToDevice, s));
  if (ready_[static_cast<size_t>(from)]) {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sampler.rngs + to, sampler.rngs + from,
                                                  sizeof(cuda::Mt19937_64),
                                                  cudaMemcpyDeviceToDevice, s));
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sampler.params + to, sampler.params + from,
                                                  sizeof(cuda::DeviceSamplingParams),
                                                  cudaMemcpyDeviceToDevice, s));
    if (bias_counts_[static_cast<size_t>(from)] > 0) {
      LINSERVE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(biases(to), biases(from),
                          static_cast<size_t>(cuda::LogitBiasEntries(vocab_)) * sizeof(int32_t),
                          cudaMemcpyDeviceToDevice, s));
    }
  }
  return absl::OkStatus();
}

void DeviceSampler::CopySettings(int32_t from, int32_t to) {
  const size_t f = static_cast<size_t>(from);
  const size_t t = static_cast<size_t>(to);
  ready_[t] = ready_[f];
  top_logprobs_[t] = top_logprobs_[f];
  greedy_[t] = greedy_[f];
  bias_counts_[t] = bias_counts_[f];
  pending_[t] = pending_[f];  // EnqueueCopy copied the device counts: with these, the history
}

absl::Status DeviceSampler::Start(cudaStream_t s, int32_t slot, const SamplingParams& params,
                                  int32_t top_logprobs, absl::Span<const TokenId> observed) {
  cuda::DeviceSamplingParams device_params;
  device_params.temperature = params.temperature;
  device_params.top_k = params.top_k;
  device_params.top_p = params.top_p;
  device_params.min_p = params.min_p;
  device_params.repetition_penalty = params.repetition_penalty;
  device_params.presence_penalty = params.presence_penalty;
  device_params.frequency_penalty = params.frequency_penalty;
  device_params.bias_count = static_cast<int32_t>(params.logit_bias.size());
  if (device_params.bias_count > 0) LINSERVE_RETURN_IF_ERROR(UploadBiases(s, slot, params));
  LINSERVE_RETURN_IF_ERROR(
      cuda::LaunchStartSampling(s, ws_.sampler, slot, device_params, params.seed));
  const size_t at = static_cast<size_t>(slot);
  bias_counts_[at] = device_params.bias_count;
  std::vector<TokenId>& pending = pending_[at];
  pending.insert(pending.end(), observed.begin(), observed.end());
  if (StartCounts(slot, params, {})) {
    LINSERVE_RETURN_IF_ERROR(CountOnDevice(s, slot, pending));
    pending = {};
  }
  ready_[at] = 1;
  top_logprobs_[at] = top_logprobs;
  greedy_[at] = params.temperature == 0.0f ? 1 : 0;
  return absl::OkStatus();
}

absl::Status DeviceSampler::UploadBiases(cudaStream_t s, int32_t slot,
                                         const SamplingParams& params) {
  // The layout of cuda::LogitBiasEntries: the bitmask, the ids ascending, their biases.
  const int32_t words = TokenMaskWords(vocab_);
  bias_staging_.assign(static_cast<size_t>(cuda::LogitBiasEntries(vocab_)), 0);
  std::vector<LogitBias> sorted = params.logit_bias;
  std::sort(sorted.begin(), sorted.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TokenId t = sorted[i].token;
    bias_staging_[static_cast<size_t>(t / 32)] |= static_cast<int32_t>(uint32_t{1} << (t % 32));
    bias_staging_[static_cast<size_t>(words) + i] = t;
    bias_staging_[static_cast<size_t>(words + cuda::kMaxDeviceLogitBias) + i] =
        absl::bit_cast<int32_t>(sorted[i].bias);
  }
  absl::StatusOr<int32_t*> uploaded = Upload(s, bias_staging_, biases(slot));
  return uploaded.status();
}

absl::StatusOr<int32_t*> DeviceSampler::Upload(cudaStream_t s, absl::Span<const int32_t> values,
                                                int32_t* dest) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (!arena_copied_.get()) {
    absl::StatusOr<cuda::Event> event = cuda::Event::Create();
    if (!event.ok()) return event.status();
    arena_copied_ = *std::move(event);
  }
  if (arena_used_ + n > arena_entries_) {
    // Full: once the copies out of it have run, it starts over.
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(arena_copied_.get()));
    arena_used_ = 0;
  }
  int32_t* staged = ws_.count_staging + arena_used_;
  if (dest == nullptr) dest = ws_.count_upload + arena_used_;
  std::copy(values.begin(), values.end(), staged);
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dest, staged, static_cast<size_t>(n) * sizeof(int32_t),
                      cudaMemcpyHostToDevice, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(arena_copied_.get(), s));
  arena_used_ += n;
  return dest;
}

absl::Status DeviceSampler::CountOnDevice(cudaStream_t s, int32_t slot,
                                          absl::Span<const TokenId> tokens) {
  // At most the arena at a time.
  for (size_t first = 0; first < tokens.size(); first += static_cast<size_t>(arena_entries_)) {
    const absl::Span<const TokenId> piece =
        tokens.subspan(first, std::min<size_t>(static_cast<size_t>(arena_entries_),
                                               tokens.size() - first));
    absl::StatusOr<int32_t*> uploaded = Upload(s, piece, nullptr);
    if (!uploaded.ok()) return uploaded.status();
    LINSERVE_RETURN_IF_ERROR(cuda::LaunchCountTokens(s, *uploaded, static_cast<int>(piece.size()),
                                                     vocab_, slot, ws_.sampler.seen_counts));
  }
  return absl::OkStatus();
}

absl::Status DeviceSampler::SetSeenCounts(cudaStream_t s, int32_t slot,
                                          absl::Span<const TokenCount> counts_in) {
  dense_counts_.assign(static_cast<size_t>(vocab_), 0);
  for (const TokenCount& c : counts_in) {
    // The device counts are int32: a count past that saturates, which no penalty can tell apart.
    const int64_t sum = dense_counts_[c.token] + c.count;
    dense_counts_[c.token] =
        static_cast<int32_t>(std::min<int64_t>(sum, std::numeric_limits<int32_t>::max()));
  }
  absl::StatusOr<int32_t*> uploaded = Upload(s, dense_counts_, counts(slot));
  if (!uploaded.ok()) return uploaded.status();
  pending_[static_cast<size_t>(slot)] = {};
  return absl::OkStatus();
}

absl::Status DeviceSampler::CheckOutput(absl::Span<const int32_t> slots,
                                        absl::Span<const uint32_t* const> masks,
                                        const SampleOutput& out, absl::string_view what) const {
  bool logprobs = false;
  for (int32_t slot : slots) {
    if (!ready_[static_cast<size_t>(slot)]) return NoSamplerError(SlotId{slot}, what);
    logprobs = logprobs || top_logprobs_[static_cast<size_t>(slot)] > 0;
  }
  for (size_t i = 0; i < masks.size(); ++i) {
    LINSERVE_RETURN_IF_ERROR(
        CheckTokenMask(masks[i], vocab_, absl::StrCat(what, ": row ", i, "'s allowed_tokens")));
  }
  return CheckSampleOutput(slots.size(), logprobs, out, what);
}

absl::StatusOr<bool> DeviceSampler::StageMasks(cudaStream_t s,
                                                absl::Span<const uint32_t* const> masks, int rows,
                                                int set) const {
  if (std::all_of(masks.begin(), masks.end(), [](const uint32_t* m) { return m == nullptr; })) {
    return false;
  }
  const int32_t words = TokenMaskWords(vocab_);
  const MaskBuffers& host = ws_.staging[static_cast<size_t>(set)].masks;
  int32_t masked = 0;
  for (int i = 0; i < rows; ++i) {
    const uint32_t* mask = static_cast<size_t>(i) < masks.size() ? masks[i] : nullptr;
    host.index[i] = mask == nullptr ? -1 : masked;
    if (mask == nullptr) continue;
    std::copy_n(mask, words, host.words + static_cast<int64_t>(masked) * words);
    ++masked;
  }
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      ws_.device_masks.words, host.words, static_cast<size_t>(masked) * words * sizeof(uint32_t),
      cudaMemcpyHostToDevice, s));
  return true;
}

absl::StatusOr<DeviceSampler::Variant> DeviceSampler::Stage(
    cudaStream_t s, absl::Span<const int32_t> slots, absl::Span<const uint32_t* const> masks,
    int rows, int set) {
  Variant variant;
  absl::StatusOr<bool> masked = StageMasks(s, masks, rows, set);
  if (!masked.ok()) return masked.status();
  variant.masks = *masked;
  const SampleBuffers& host = ws_.staging[static_cast<size_t>(set)].samples;
  for (int i = 0; i < rows; ++i) {
    const bool real = static_cast<size_t>(i) < slots.size();
    host.top_n[i] = real ? top_logprobs_[static_cast<size_t>(slots[i])] : 0;
    variant.logprobs = variant.logprobs || host.top_n[i] > 0;
    if (!real) continue;
    const bool greedy = greedy_[static_cast<size_t>(slots[i])] != 0;
    variant.greedy = variant.greedy || greedy;
    variant.sampled = variant.sampled || !greedy;
  }
  return variant;
}

absl::Status DeviceSampler::EnqueueSampling(cudaStream_t s, const Variant& variant, int rows,
                                            int set) const {
  const float* logits = ws_.act.logits;
  const SampleBuffers& dev = ws_.device_samples;
  const PinnedStaging& host = ws_.staging[static_cast<size_t>(set)];
  cuda::RowMasks row_masks;
  if (variant.masks) {
    const MaskBuffers& masks = ws_.device_masks;
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(masks.index, host.masks.index,
                                                  rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                                                  s));
    row_masks = cuda::RowMasks{masks.words, masks.index, TokenMaskWords(vocab_)};
  }
  cuda::SampleArgs sample;
  sample.logits = logits;
  sample.slots = ws_.device_rows.slots;
  sample.state = ws_.sampler;
  sample.masks = row_masks;
  sample.rows = rows;
  sample.vocab = vocab_;
  sample.logits_stride = ws_.act.logits_stride;
  sample.tokens = dev.tokens;
  sample.any_greedy = variant.greedy;
  sample.any_sampled = variant.sampled;
  sample.argmax_splits = cuda::ArgmaxSplits(rows, vocab_);
  sample.argmax = ws_.argmax;
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchSample(s, sample));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.samples.tokens, dev.tokens,
                                                rows * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  if (!variant.logprobs) return absl::OkStatus();
  // The sample kernel leaves the logits as the LM head wrote them: before the mask, penalties
  // and temperature.
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.top_n, host.samples.top_n,
                                                rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  cuda::TopLogprobsArgs args;
  args.logits = logits;
  args.tokens = dev.tokens;
  args.top_n = dev.top_n;
  args.rows = rows;
  args.vocab = vocab_;
  args.logits_stride = ws_.act.logits_stride;
  args.max_top = kMaxTopLogprobs;
  args.masks = row_masks;
  args.logprobs = dev.logprobs;
  args.top_ids = dev.top_ids;
  args.top_logprobs = dev.top_logprobs;
  LINSERVE_RETURN_IF_ERROR(cuda::LaunchTopLogprobs(s, args));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.samples.logprobs, dev.logprobs,
                                                rows * sizeof(float), cudaMemcpyDeviceToHost, s));
  const size_t top = static_cast<size_t>(rows) * kMaxTopLogprobs;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.samples.top_ids, dev.top_ids,
                                                top * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.samples.top_logprobs, dev.top_logprobs,
                                                top * sizeof(float), cudaMemcpyDeviceToHost, s));
  return absl::OkStatus();
}

absl::StatusOr<bool> DeviceSampler::Enqueue(cudaStream_t s, absl::Span<const int32_t> slots,
                                            absl::Span<const uint32_t* const> masks, int set) {
  const int rows = static_cast<int>(slots.size());
  absl::StatusOr<Variant> variant = Stage(s, slots, masks, rows, set);
  if (!variant.ok()) return variant.status();
  LINSERVE_RETURN_IF_ERROR(EnqueueSampling(s, *variant, rows, set));
  return variant->logprobs;
}

void DeviceSampler::CopySamples(size_t rows, bool logprobs, const SampleOutput& out,
                                int set) const {
  const SampleBuffers& host = ws_.staging[static_cast<size_t>(set)].samples;
  std::copy(host.tokens, host.tokens + rows, out.tokens.begin());
  if (!logprobs) return;
  for (size_t i = 0; i < rows; ++i) {
    const int32_t n = host.top_n[i];
    if (n == 0) continue;
    out.logprobs[i] = host.logprobs[i];
    for (int32_t k = 0; k < n; ++k) {
      const size_t at = i * kMaxTopLogprobs + static_cast<size_t>(k);
      out.top_logprobs[at] = {host.top_ids[at], host.top_logprobs[at]};
    }
  }
}

}  // namespace linserve
