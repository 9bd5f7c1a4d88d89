#include "model/backend/cuda/cuda_workspace.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/mt19937_64.h"
#include "model/backend/cuda/buffer_layout.h"
#include "model/backend/cuda/padded_vocab.h"
#include "model/backend/token_mask.h"

namespace linserve {
namespace {

using cuda::DeviceBuffer;
using cuda::FormatBytes;

std::array<size_t, 5> ReserveSamples(BufferLayout& layout, size_t rows) {
  return {layout.Reserve(rows * sizeof(int32_t)), layout.Reserve(rows * sizeof(int32_t)),
          layout.Reserve(rows * sizeof(float)),
          layout.Reserve(rows * kMaxTopLogprobs * sizeof(int32_t)),
          layout.Reserve(rows * kMaxTopLogprobs * sizeof(float))};
}

// Token masks for `rows` rows over `vocab` tokens: the words, then the row indices.
std::array<size_t, 2> ReserveMasks(BufferLayout& layout, size_t rows, int64_t vocab) {
  return {layout.Reserve(rows * static_cast<size_t>(TokenMaskWords(static_cast<int32_t>(vocab))) *
                         sizeof(uint32_t)),
          layout.Reserve(rows * sizeof(int32_t))};
}

MaskBuffers MasksAt(char* base, const std::array<size_t, 2>& at) {
  return MaskBuffers{reinterpret_cast<uint32_t*>(base + at[0]),
                     reinterpret_cast<int32_t*>(base + at[1])};
}

SampleBuffers SamplesAt(char* base, const std::array<size_t, 5>& at) {
  return SampleBuffers{
      reinterpret_cast<int32_t*>(base + at[0]), reinterpret_cast<int32_t*>(base + at[1]),
      reinterpret_cast<float*>(base + at[2]), reinterpret_cast<int32_t*>(base + at[3]),
      reinterpret_cast<float*>(base + at[4])};
}

}  // namespace

void ScratchPlan::Reserve(ScratchRole role, int index, size_t bytes) {
  std::vector<size_t>& sizes = sizes_[static_cast<size_t>(role)];
  if (sizes.size() <= static_cast<size_t>(index)) sizes.resize(static_cast<size_t>(index) + 1);
  sizes[static_cast<size_t>(index)] = std::max(sizes[static_cast<size_t>(index)], bytes);
}

cuda::DType StateDType(StatePrecision precision) {
  return precision == StatePrecision::kBf16 ? cuda::DType::kBf16 : cuda::DType::kF32;
}

absl::StatusOr<CudaWorkspace> AllocateWorkspace(const ModelConfig& config,
                                                const BackendOptions& options, int32_t capacity,
                                                int rows, const ScratchPlan& scratch,
                                                cuda::DType dtype, absl::string_view device,
                                                int64_t weights_bytes) {
  const int64_t vocab = config.vocab_size;
  const int64_t slot_bytes =
      config.StateFloatsPerSlot() * StateElementBytes(options.state_precision);
  const int64_t pool_bytes = static_cast<int64_t>(capacity) * slot_bytes;
  const size_t slots = static_cast<size_t>(capacity);
  BufferLayout sampler_layout;
  const size_t sampler_params = sampler_layout.Reserve(slots * sizeof(cuda::DeviceSamplingParams));
  const size_t sampler_rngs = sampler_layout.Reserve(slots * sizeof(cuda::Mt19937_64));
  const size_t sampler_counts =
      sampler_layout.Reserve(slots * static_cast<size_t>(vocab) * sizeof(int32_t));
  const size_t sampler_biases = sampler_layout.Reserve(
      slots * static_cast<size_t>(cuda::LogitBiasEntries(static_cast<int>(vocab))) *
      sizeof(int32_t));
  const int64_t sampler_bytes = static_cast<int64_t>(sampler_layout.size());

  const int64_t d = config.d_model;
  const size_t n = static_cast<size_t>(rows);
  const size_t element = cuda::DTypeSize(dtype);
  BufferLayout work;
  const size_t x = work.Reserve(n * d * sizeof(float));
  const size_t xt = work.Reserve(n * d * element);
  const size_t proj = work.Reserve(n * d * sizeof(float));
  const int64_t logits_stride = PaddedVocab(vocab);
  const size_t logits =
      work.Reserve(static_cast<size_t>(options.max_batch_size) * logits_stride * sizeof(float));
  std::array<std::vector<size_t>, 2> scratch_at;
  for (ScratchRole role : {ScratchRole::kMixer, ScratchRole::kMlp}) {
    for (size_t bytes : scratch.sizes(role)) {
      scratch_at[static_cast<size_t>(role)].push_back(work.Reserve(bytes));
    }
  }
  const size_t tokens = work.Reserve(n * sizeof(int32_t));
  const size_t positions = work.Reserve(n * sizeof(int64_t));
  const size_t row_slots = work.Reserve(n * sizeof(int32_t));
  const size_t row_sources = work.Reserve(n * sizeof(int32_t));
  const size_t row_pieces = work.Reserve(n * sizeof(cuda::PrefillPiece));
  const size_t row_chunks = work.Reserve(n * sizeof(cuda::PrefillChunk));
  const std::array<size_t, 5> samples = ReserveSamples(work, n);
  const size_t sampled_rows = static_cast<size_t>(options.max_batch_size);
  const std::array<size_t, 2> masks = ReserveMasks(work, sampled_rows, vocab);
  const size_t decode_picks = work.Reserve(sampled_rows * sizeof(int32_t));
  const size_t argmax_partials = work.Reserve(static_cast<size_t>(cuda::kArgmaxSplitRows) *
                                              cuda::kMaxArgmaxSplits * sizeof(cuda::ArgmaxPartial));
  const size_t argmax_arrivals = work.Reserve(cuda::kArgmaxSplitRows * sizeof(uint32_t));
  const size_t read_staging = work.Reserve(kSlotReads * static_cast<size_t>(slot_bytes));
  const size_t count_bytes = static_cast<size_t>(CountArenaEntries(vocab)) * sizeof(int32_t);
  const size_t count_upload = work.Reserve(count_bytes);

  size_t free_bytes = 0;
  size_t total_bytes = 0;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t needed = static_cast<uint64_t>(pool_bytes) + static_cast<uint64_t>(sampler_bytes) +
                          work.size() + kGemmWorkspaceBytes;
  if (needed > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "CUDA backend: the state pool (", capacity, " slots × ", FormatBytes(slot_bytes), " = ",
        FormatBytes(pool_bytes), "), the sampler state (", FormatBytes(sampler_bytes),
        ") and the activations (", FormatBytes(work.size() + kGemmWorkspaceBytes), ") need ",
        FormatBytes(needed), " but ", device, " has ", FormatBytes(free_bytes),
        " free after the weights (", FormatBytes(weights_bytes),
        "); lower BackendOptions.state_memory_budget_bytes (", options.state_memory_budget_bytes,
        ") or max_slots (", options.max_slots, ")"));
  }

  CudaWorkspace ws;
  absl::StatusOr<DeviceBuffer> pool = DeviceBuffer::Allocate(
      static_cast<size_t>(pool_bytes),
      absl::StrCat("the state pool (", capacity, " slots × ", FormatBytes(slot_bytes), ")"));
  if (!pool.ok()) return pool.status();
  ws.state_buffer = *std::move(pool);
  ws.state = ws.state_buffer.data();
  ws.state_dtype = StateDType(options.state_precision);
  ws.state_pool_bytes = pool_bytes;

  absl::StatusOr<DeviceBuffer> sampler =
      DeviceBuffer::Allocate(static_cast<size_t>(sampler_bytes),
                             absl::StrCat("the device sampler state (", capacity, " slots)"));
  if (!sampler.ok()) return sampler.status();
  ws.sampler_buffer = *std::move(sampler);
  ws.sampler_bytes = sampler_bytes;
  char* sampler_base = ws.sampler_buffer.as<char>();
  ws.sampler.params = reinterpret_cast<cuda::DeviceSamplingParams*>(sampler_base + sampler_params);
  ws.sampler.rngs = reinterpret_cast<cuda::Mt19937_64*>(sampler_base + sampler_rngs);
  ws.sampler.seen_counts = reinterpret_cast<int32_t*>(sampler_base + sampler_counts);
  ws.sampler.biases = reinterpret_cast<int32_t*>(sampler_base + sampler_biases);

  absl::StatusOr<DeviceBuffer> activations =
      DeviceBuffer::Allocate(work.size(), absl::StrCat("the activations (", rows, " rows)"));
  if (!activations.ok()) return activations.status();
  ws.activation_buffer = *std::move(activations);
  ws.activation_bytes = static_cast<int64_t>(work.size() + kGemmWorkspaceBytes);
  char* w = ws.activation_buffer.as<char>();
  ws.act.x = reinterpret_cast<float*>(w + x);
  ws.act.xt = w + xt;
  ws.act.proj = reinterpret_cast<float*>(w + proj);
  ws.act.logits = reinterpret_cast<float*>(w + logits);
  ws.act.logits_stride = logits_stride;
  for (size_t role = 0; role < scratch_at.size(); ++role) {
    for (size_t offset : scratch_at[role]) ws.scratch[role].push_back(w + offset);
  }
  ws.device_rows.tokens = reinterpret_cast<int32_t*>(w + tokens);
  ws.device_rows.positions = reinterpret_cast<int64_t*>(w + positions);
  ws.device_rows.slots = reinterpret_cast<int32_t*>(w + row_slots);
  ws.device_rows.sources = reinterpret_cast<int32_t*>(w + row_sources);
  ws.device_rows.pieces = reinterpret_cast<cuda::PrefillPiece*>(w + row_pieces);
  ws.device_rows.chunks = reinterpret_cast<cuda::PrefillChunk*>(w + row_chunks);
  ws.device_samples = SamplesAt(w, samples);
  ws.device_masks = MasksAt(w, masks);
  ws.decode_picks = reinterpret_cast<int32_t*>(w + decode_picks);
  ws.argmax.partials = reinterpret_cast<cuda::ArgmaxPartial*>(w + argmax_partials);
  ws.argmax.arrivals = reinterpret_cast<uint32_t*>(w + argmax_arrivals);
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemset(ws.argmax.arrivals, 0, cuda::kArgmaxSplitRows * sizeof(uint32_t)));
  ws.read_staging = w + read_staging;
  ws.count_upload = reinterpret_cast<int32_t*>(w + count_upload);

  struct StagingAt {
    size_t tokens, positions, slots, sources, pieces, chunks;
    std::array<size_t, 5> samples;
    std::array<size_t, 2> masks;
  };
  BufferLayout host;
  std::array<StagingAt, kStagingSets> staging_at;
  for (StagingAt& at : staging_at) {
    at.tokens = host.Reserve(n * sizeof(int32_t));
    at.positions = host.Reserve(n * sizeof(int64_t));
    at.slots = host.Reserve(n * sizeof(int32_t));
    at.sources = host.Reserve(n * sizeof(int32_t));
    at.pieces = host.Reserve(n * sizeof(cuda::PrefillPiece));
    at.chunks = host.Reserve(n * sizeof(cuda::PrefillChunk));
    at.samples = ReserveSamples(host, n);
    at.masks = ReserveMasks(host, sampled_rows, vocab);
  }
  const size_t read_landing = host.Reserve(kSlotReads * static_cast<size_t>(slot_bytes));
  const size_t count_staging = host.Reserve(count_bytes);
  absl::StatusOr<cuda::PinnedBuffer> pinned =
      cuda::PinnedBuffer::Allocate(host.size(), "the pinned step inputs");
  if (!pinned.ok()) return pinned.status();
  ws.pinned = *std::move(pinned);
  char* h = ws.pinned.as<char>();
  for (size_t i = 0; i < staging_at.size(); ++i) {
    const StagingAt& at = staging_at[i];
    PinnedStaging& set = ws.staging[i];
    set.rows.tokens = reinterpret_cast<int32_t*>(h + at.tokens);
    set.rows.positions = reinterpret_cast<int64_t*>(h + at.positions);
    set.rows.slots = reinterpret_cast<int32_t*>(h + at.slots);
    set.rows.sources = reinterpret_cast<int32_t*>(h + at.sources);
    set.rows.pieces = reinterpret_cast<cuda::PrefillPiece*>(h + at.pieces);
    set.rows.chunks = reinterpret_cast<cuda::PrefillChunk*>(h + at.chunks);
    set.samples = SamplesAt(h, at.samples);
    set.masks = MasksAt(h, at.masks);
  }
  ws.read_landing = h + read_landing;
  ws.count_staging = reinterpret_cast<int32_t*>(h + count_staging);
  return ws;
}

}  // namespace linserve
