#include "model/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_forward.h"
#include "model/backend/cuda/cuda_layer.h"
#include "model/backend/cuda/cuda_weights.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/backend/cuda/decode_graphs.h"
#include "model/backend/cuda/device_sampler.h"
#include "model/backend/cuda/prefill_passes.h"
#include "model/backend/slot_pool.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

using cuda::FormatBytes;

// Decode rows are a grid dimension of the attention kernel (at most 65535).
constexpr int32_t kMaxBatch = 1 << 15;
// A bf16 state element widened to the fp32 StateBlob (exact).
float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

// An fp32 StateBlob element rounded to a bf16 state element, to nearest even as the kernels'
// stores round (a NaN stays a NaN).
uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Rows of the activations: a decode batch's or a prefill pass's, whichever is more.
int ActivationRows(const BackendOptions& options) {
  return std::max(options.max_batch_size, CudaPrefillSegment(options));
}

// What CreateCudaBackend sets up before the backend exists, in the order it does.
struct DeviceParts {
  std::string description;
  cuda::Stream stream;
  std::unique_ptr<cuda::Gemm> gemm;
  CudaWeights weights;
  CudaLayers layers;
  CudaWorkspace workspace;
  std::array<cuda::Event, kStagingSets> step_done;  // recorded after a decode step's copies
  cuda::Stream copy_stream;                          // asynchronous reads' PCIe copies
  std::array<cuda::Event, kSlotReads> read_staged;   // per read buffer: staged on the device
  std::array<cuda::Event, kSlotReads> read_landed;   // per read buffer: in pinned memory
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(const ModelConfig& config, const BackendOptions& options,
                  const CudaBackendOptions& cuda_options, int32_t capacity, DeviceParts parts)
      : config_(config),
        cuda_options_(cuda_options),
        state_floats_(config.StateFloatsPerSlot()),
        state_bytes_(state_floats_ * StateElementBytes(options.state_precision)),
        description_(std::move(parts.description)),
        pool_(config_, options, capacity),
        stream_(std::move(parts.stream)),
        gemm_(std::move(parts.gemm)),
        weights_(std::move(parts.weights)),
        ws_(std::move(parts.workspace)),
        forward_(config_, WeightDType(options.weight_precision), weights_, ws_, *gemm_,
                 std::move(parts.layers)),
        sampler_(capacity, config.vocab_size, ws_),
        prefill_(config_, options, CudaPrefillSegment(options), forward_, ws_, pool_),
        step_done_(std::move(parts.step_done)),
        copy_stream_(std::move(parts.copy_stream)),
        read_staged_(std::move(parts.read_staged)),
        read_landed_(std::move(parts.read_landed)),
        graphs_{DecodeGraphs(options.max_batch_size, DeviceSampler::kVariants),
                DecodeGraphs(options.max_batch_size, DeviceSampler::kVariants)} {
    for (std::vector<DecodeItem>& items : set_items_) {
      items.reserve(static_cast<size_t>(options.max_batch_size));
    }
    for (int i = kSlotReads - 1; i >= 0; --i) free_read_buffers_.push_back(i);
  }

  // Checks what the backend was given, prepares the layers and waits for both, the uploads and
  // the arrival counters' cudaMemsets — those run on the legacy default stream, which the
  // backend's non-blocking streams do not wait for, so the whole device is waited for.
  absl::Status Initialize() {
    LINSERVE_RETURN_IF_ERROR(forward_.Check());
    LINSERVE_RETURN_IF_ERROR(forward_.Prepare(stream_.get()));
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return absl::OkStatus();
  }

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
  // Stages the slot on the device (a copy on the backend's stream, in order with the steps)
  // and copies it to a pinned buffer of its own on copy_stream_, off the step's path; waits
  // only when kSlotReads reads are in flight (for the oldest).
  absl::StatusOr<int64_t> StartReadSlot(SlotId slot) override;
  std::vector<SlotRead> FinishedReads(bool wait) override;

  absl::Status StartSampling(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                             absl::Span<const TokenId> observed) override;
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) override;
  absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                               const SampleOutput& out) override;
  absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                const SampleOutput& out, const uint32_t* allowed_tokens) override;
  // In passes holding several sessions' tokens (prefill_passes.h).
  absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) override;

  // The step runs on the backend's stream; the host returns at once. Every other call that
  // stages through the pinned buffers first finishes the steps in flight (FinishLaunched): its
  // GPU work would queue behind them anyway.
  bool asynchronous() const override { return true; }
  int32_t max_steps_in_flight() const override { return kStagingSets; }
  absl::Status LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                     const SampleOutput& out) override;
  absl::Status CollectSamples() override;
  CudaMemoryUse memory_use() const override {
    return {.weights_bytes = static_cast<int64_t>(weights_.buffer.size()),
            .state_pool_bytes = ws_.state_pool_bytes,
            .sampler_bytes = ws_.sampler_bytes,
            .workspace_bytes = ws_.activation_bytes};
  }
  int64_t logits_stride() const override { return ws_.act.logits_stride; }
  std::string device_description() const override { return description_; }

 private:
  absl::Status SetDevice() const {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda_options_.device));
    return absl::OkStatus();
  }
  absl::Status Synchronize() const {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  }
  // A slot's state in the pool, state_bytes_ long.
  void* SlotState(int32_t slot) const {
    return static_cast<char*>(ws_.state) + slot * state_bytes_;
  }
  // Zeroes a slot's state and seen counts (enqueued; the caller synchronizes).
  absl::Status EnqueueClear(int32_t slot);
  // The steps launched and not yet collected: waits for them and copies their samples to their
  // outputs, so that the pinned buffers are free again. Returns the outcome (the first error).
  absl::Status FinishLaunched() const;
  // Samples rows [0, sample_slots_.size()) of the logits for sample_slots_ (the device row
  // inputs' slots) under sample_masks_ through pinned set 0, waits, and copies the samples to
  // `out`.
  absl::Status SampleAndCopy(const SampleOutput& out);
  // Row inputs upload (from pinned set `set`) + layers + LM head for a decode bucket, logits in
  // act.logits; then, unless `sampling` is the empty variant (key 0), the sampler's pass as
  // staged in the set, its copies to the set's pinned samples, and the picks' copy to
  // decode_picks for the next launch's previous rows.
  absl::Status EnqueueDecodeStep(int rows, int set, const DeviceSampler::Variant& sampling);
  // Runs one decode step for `batch` (validated): fills pinned set `set`'s inputs, pads to the
  // bucket, stages the sampling of sample_slots_ under sample_masks_ when `sample`, and
  // launches the (variant, bucket) graph for the set, capturing it on first use, or the kernels
  // directly. Returns the variant that ran (key 0 without sampling).
  absl::StatusOr<DeviceSampler::Variant> RunDecodeStep(absl::Span<const DecodeItem> batch,
                                                       int set, bool sample);

  const ModelConfig config_;
  const CudaBackendOptions cuda_options_;
  const int64_t state_floats_;
  const int64_t state_bytes_;  // of a slot in the pool: state_floats_ elements of ws_.state_dtype
  // Host staging of a bf16 slot for ReadSlot / WriteSlot (unused with an fp32 state).
  mutable std::vector<uint16_t> bf16_staging_;
  const std::string description_;
  SlotPool pool_;
  cuda::Stream stream_;
  std::unique_ptr<cuda::Gemm> gemm_;
  CudaWeights weights_;
  CudaWorkspace ws_;
  CudaForward forward_;
  DeviceSampler sampler_;
  PrefillPasses prefill_;
  const std::array<cuda::Event, kStagingSets> step_done_;  // per pinned set
  const cuda::Stream copy_stream_;
  const std::array<cuda::Event, kSlotReads> read_staged_;
  const std::array<cuda::Event, kSlotReads> read_landed_;
  // The asynchronous reads in flight, oldest first: ticket, read buffer, the slot's position.
  struct PendingRead {
    int64_t ticket = 0;
    int buffer = 0;
    int64_t position = 0;
  };
  std::deque<PendingRead> reads_;
  std::vector<int> free_read_buffers_;
  std::vector<SlotRead> landed_;  // reads landed (while a start waited) and not handed over
  int64_t next_ticket_ = 0;
  // Waits for the oldest read and moves it to landed_.
  void LandOldestRead();
  std::array<DecodeGraphs, kStagingSets> graphs_;          // per pinned set

  // A launched step until CollectSamples: its output and rows, whether any row asked for
  // logprobs, its pinned set, and once it has been waited for, its outcome.
  struct Launched {
    SampleOutput out;
    size_t rows = 0;
    bool logprobs = false;
    int set = 0;
    std::optional<absl::Status> outcome;
  };
  mutable std::deque<Launched> launched_;  // oldest first, at most kStagingSets
  // The batch last launched through each pinned set (CheckPreviousRows of the next launch).
  std::array<std::vector<DecodeItem>, kStagingSets> set_items_;

  std::vector<int32_t> sample_slots_;  // host mirror of the device row slots for sampled rows
  std::vector<const uint32_t*> sample_masks_;  // their token masks (nullptr = none)
  // Sets sample_slots_ and sample_masks_ to a decode batch's.
  void SetSampleRows(absl::Span<const DecodeItem> batch) {
    sample_slots_.resize(batch.size());
    sample_masks_.resize(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      sample_slots_[i] = batch[i].slot.value;
      sample_masks_[i] = batch[i].allowed_tokens;
    }
  }
};

// ---- Slots -----------------------------------------------------------------------------

absl::Status CudaBackendImpl::EnqueueClear(int32_t slot) {
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      SlotState(slot), 0, static_cast<size_t>(state_bytes_), stream_.get()));
  return sampler_.EnqueueClear(stream_.get(), slot);
}

absl::StatusOr<SlotId> CudaBackendImpl::AllocateSlot() {
  if (pool_.free_slots() == 0) return pool_.Allocate().status();
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  absl::StatusOr<SlotId> slot = pool_.Allocate();
  if (!slot.ok()) return slot.status();
  // Enqueued behind the steps in flight, without waiting: every later use of the slot is too.
  absl::Status cleared = EnqueueClear(slot->value);
  if (!cleared.ok()) {
    pool_.Free(*slot);
    return cleared;
  }
  return *slot;
}

void CudaBackendImpl::FreeSlot(SlotId slot) {
  if (pool_.Free(slot)) sampler_.Forget(slot.value);
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
                                                static_cast<size_t>(state_bytes_),
                                                cudaMemcpyDeviceToDevice, s));
  LINSERVE_RETURN_IF_ERROR(sampler_.EnqueueCopy(s, from.value, to.value));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  pool_.set_position(to, pool_.position(from));
  sampler_.CopySettings(from.value, to.value);
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
  const bool bf16 = ws_.state_dtype == cuda::DType::kBf16;
  if (bf16) bf16_staging_.resize(static_cast<size_t>(state_floats_));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      bf16 ? static_cast<void*>(bf16_staging_.data()) : static_cast<void*>(out.state.data()),
      SlotState(slot.value), static_cast<size_t>(state_bytes_), cudaMemcpyDeviceToHost,
      stream_.get()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  if (bf16) {
    std::transform(bf16_staging_.begin(), bf16_staging_.end(), out.state.begin(), Bf16ToFloat);
  }
  out.position = pool_.position(slot);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackendImpl::StartReadSlot(SlotId slot) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "StartReadSlot: slot"));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  if (free_read_buffers_.empty()) LandOldestRead();
  const int buffer = free_read_buffers_.back();
  free_read_buffers_.pop_back();
  const size_t offset = static_cast<size_t>(buffer) * static_cast<size_t>(state_bytes_);
  // The device copy follows the steps in flight; the PCIe copy waits for it on the copy stream.
  auto enqueue = [&]() -> absl::Status {
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ws_.read_staging + offset,
                                                  SlotState(slot.value),
                                                  static_cast<size_t>(state_bytes_),
                                                  cudaMemcpyDeviceToDevice, stream_.get()));
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(read_staged_[buffer].get(), stream_.get()));
    LINSERVE_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(copy_stream_.get(), read_staged_[buffer].get(), 0));
    LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ws_.read_landing + offset,
                                                  ws_.read_staging + offset,
                                                  static_cast<size_t>(state_bytes_),
                                                  cudaMemcpyDeviceToHost, copy_stream_.get()));
    LINSERVE_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(read_landed_[buffer].get(), copy_stream_.get()));
    return absl::OkStatus();
  };
  if (absl::Status enqueued = enqueue(); !enqueued.ok()) {
    // Whatever part was queued runs before the buffer is handed out again.
    cudaStreamSynchronize(stream_.get());
    cudaStreamSynchronize(copy_stream_.get());
    free_read_buffers_.push_back(buffer);
    return enqueued;
  }
  reads_.push_back(
      PendingRead{.ticket = next_ticket_, .buffer = buffer, .position = pool_.position(slot)});
  return next_ticket_++;
}

void CudaBackendImpl::LandOldestRead() {
  const PendingRead read = reads_.front();
  reads_.pop_front();
  free_read_buffers_.push_back(read.buffer);
  const cudaError_t waited = cudaEventSynchronize(read_landed_[read.buffer].get());
  if (waited != cudaSuccess) {
    landed_.push_back(SlotRead{
        .ticket = read.ticket,
        .state = cuda::CudaErrorToStatus(waited, "cudaEventSynchronize", __FILE__, __LINE__)});
    return;
  }
  StateBlob blob;
  blob.position = read.position;
  blob.state.resize(static_cast<size_t>(state_floats_));
  const char* bytes =
      ws_.read_landing + static_cast<size_t>(read.buffer) * static_cast<size_t>(state_bytes_);
  if (ws_.state_dtype == cuda::DType::kBf16) {
    const uint16_t* elements = reinterpret_cast<const uint16_t*>(bytes);
    std::transform(elements, elements + state_floats_, blob.state.begin(), Bf16ToFloat);
  } else {
    std::memcpy(blob.state.data(), bytes, static_cast<size_t>(state_bytes_));
  }
  landed_.push_back(SlotRead{.ticket = read.ticket, .state = std::move(blob)});
}

std::vector<Backend::SlotRead> CudaBackendImpl::FinishedReads(bool wait) {
  const absl::Status device = SetDevice();
  while (!reads_.empty()) {
    if (!device.ok()) {  // every read in flight fails with it
      landed_.push_back(SlotRead{.ticket = reads_.front().ticket, .state = device});
      free_read_buffers_.push_back(reads_.front().buffer);
      reads_.pop_front();
      continue;
    }
    if (!wait && cudaEventQuery(read_landed_[reads_.front().buffer].get()) == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is no error: the next launch check must not see it
      break;
    }
    LandOldestRead();
  }
  return std::exchange(landed_, {});
}

absl::Status CudaBackendImpl::WriteSlot(SlotId slot, const StateBlob& in) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckWrite(slot, in));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(EnqueueClear(slot.value));
  const bool bf16 = ws_.state_dtype == cuda::DType::kBf16;
  if (bf16) {
    bf16_staging_.resize(static_cast<size_t>(state_floats_));
    std::transform(in.state.begin(), in.state.end(), bf16_staging_.begin(), FloatToBf16);
  }
  const void* source = bf16 ? static_cast<const void*>(bf16_staging_.data())
                            : static_cast<const void*>(in.state.data());
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(SlotState(slot.value), source,
                                                static_cast<size_t>(state_bytes_),
                                                cudaMemcpyHostToDevice, stream_.get()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  pool_.set_position(slot, in.position);
  return absl::OkStatus();
}

// ---- Sampling state --------------------------------------------------------------------

absl::Status CudaBackendImpl::StartSampling(SlotId slot, const SamplingParams& params,
                                            int32_t top_logprobs,
                                            absl::Span<const TokenId> observed) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "StartSampling: slot"));
  LINSERVE_RETURN_IF_ERROR(ValidateSamplingParams(params));
  LINSERVE_RETURN_IF_ERROR(CheckLogitBiasVocabulary(params.logit_bias, config().vocab_size));
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("StartSampling: top_logprobs = ", top_logprobs,
                                                   " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  for (size_t i = 0; i < observed.size(); ++i) {
    LINSERVE_RETURN_IF_ERROR(
        pool_.CheckToken(observed[i], absl::StrCat("StartSampling: observed[", i, "]")));
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  // Behind the steps in flight, waiting for none: one kernel, and with a penalty the counts
  // through the sampler's arena.
  return sampler_.Start(stream_.get(), slot.value, params, top_logprobs, observed);
}

absl::Status CudaBackendImpl::SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckAllocated(slot, "SetSeenCounts: slot"));
  for (size_t i = 0; i < counts.size(); ++i) {
    LINSERVE_RETURN_IF_ERROR(
        pool_.CheckToken(counts[i].token, absl::StrCat("SetSeenCounts: counts[", i, "].token")));
    if (counts[i].count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetSeenCounts: counts[", i, "].count = ", counts[i].count, " is negative"));
    }
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  return sampler_.SetSeenCounts(stream_.get(), slot.value, counts);
}

// ---- Decode ----------------------------------------------------------------------------

absl::Status CudaBackendImpl::EnqueueDecodeStep(int rows, int set,
                                                const DeviceSampler::Variant& sampling) {
  cudaStream_t s = stream_.get();
  LINSERVE_RETURN_IF_ERROR(forward_.EnqueueRowInputs(
      s, rows, ws_.staging[static_cast<size_t>(set)].rows, /*decode=*/true));
  LINSERVE_RETURN_IF_ERROR(forward_.EnqueueLayers(s, rows, nullptr));
  LINSERVE_RETURN_IF_ERROR(forward_.EnqueueHead(s, 0, rows, ws_.act.logits));
  if (sampling.key() == 0) return absl::OkStatus();
  LINSERVE_RETURN_IF_ERROR(sampler_.EnqueueSampling(s, sampling, rows, set));
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ws_.decode_picks, ws_.device_samples.tokens,
                                                rows * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                                s));
  return absl::OkStatus();
}

absl::StatusOr<DeviceSampler::Variant> CudaBackendImpl::RunDecodeStep(
    absl::Span<const DecodeItem> batch, int set, bool sample) {
  DecodeGraphs& graphs = graphs_[static_cast<size_t>(set)];
  const int rows = static_cast<int>(batch.size());
  const size_t bucket_index = graphs.BucketFor(rows);
  const int bucket = graphs.rows(bucket_index);
  const RowInputs& host = ws_.staging[static_cast<size_t>(set)].rows;
  for (int i = 0; i < bucket; ++i) {
    const bool real = i < rows;
    const bool fed = real && batch[i].previous_row >= 0;
    host.tokens[i] = real && !fed ? batch[i].token : 0;
    host.positions[i] = real ? pool_.position(batch[i].slot) : 0;
    host.slots[i] = real ? batch[i].slot.value : -1;  // padding: touches no slot
    host.sources[i] = fed ? batch[i].previous_row : -1;
  }
  DeviceSampler::Variant variant;
  if (sample) {
    absl::StatusOr<DeviceSampler::Variant> staged =
        sampler_.Stage(stream_.get(), sample_slots_, sample_masks_, bucket, set);
    if (!staged.ok()) return staged.status();
    variant = *staged;
  }
  const int key = variant.key();
  if (!cuda_options_.use_cuda_graphs) {
    LINSERVE_RETURN_IF_ERROR(EnqueueDecodeStep(bucket, set, variant));
  } else if (graphs.captured(key, bucket_index)) {
    LINSERVE_RETURN_IF_ERROR(graphs.Launch(key, bucket_index, stream_.get()));
  } else {
    // First use of the (variant, bucket): run it directly (which also builds the GEMM plans the
    // capture needs), then capture the same sequence for the next steps.
    LINSERVE_RETURN_IF_ERROR(EnqueueDecodeStep(bucket, set, variant));
    LINSERVE_RETURN_IF_ERROR(graphs.Capture(
        key, bucket_index, stream_.get(), [&] { return EnqueueDecodeStep(bucket, set, variant); }));
  }
  return variant;
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
  LINSERVE_RETURN_IF_ERROR(RunDecodeStep(batch, 0, /*sample=*/false).status());
  LINSERVE_RETURN_IF_ERROR(forward_.EnqueueLogitsToHost(
      stream_.get(), static_cast<int64_t>(batch.size()), logits.data()));
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::SampleAndCopy(const SampleOutput& out) {
  absl::StatusOr<bool> logprobs =
      sampler_.Enqueue(stream_.get(), sample_slots_, sample_masks_, /*set=*/0);
  if (!logprobs.ok()) return logprobs.status();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  sampler_.CopySamples(sample_slots_.size(), *logprobs, out, /*set=*/0);
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::FinishLaunched() const {
  const bool waiting = std::any_of(launched_.begin(), launched_.end(),
                                   [](const Launched& step) { return !step.outcome.has_value(); });
  if (!waiting) return absl::OkStatus();
  const absl::Status outcome = Synchronize();
  for (Launched& step : launched_) {
    if (step.outcome.has_value()) continue;
    if (outcome.ok()) sampler_.CopySamples(step.rows, step.logprobs, step.out, step.set);
    step.outcome = outcome;
  }
  return outcome;
}

absl::Status CudaBackendImpl::LaunchDecodeAndSample(absl::Span<const DecodeItem> batch,
                                                    const SampleOutput& out) {
  if (launched_.size() >= static_cast<size_t>(kStagingSets)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LaunchDecodeAndSample: ", launched_.size(), " steps are in flight; collect one first"));
  }
  // The set the step in flight (if any) does not use: the other one's last step has finished.
  const int set = launched_.empty() ? 0 : 1 - launched_.back().set;
  const absl::Span<const DecodeItem> in_flight =
      launched_.empty() ? absl::Span<const DecodeItem>()
                        : absl::MakeConstSpan(set_items_[static_cast<size_t>(1 - set)]);
  LINSERVE_RETURN_IF_ERROR(CheckPreviousRows(batch, in_flight, "LaunchDecodeAndSample"));
  LINSERVE_RETURN_IF_ERROR(pool_.CheckBatch(batch, /*previous_rows=*/true));
  SetSampleRows(batch);
  LINSERVE_RETURN_IF_ERROR(
      sampler_.CheckOutput(sample_slots_, sample_masks_, out, "LaunchDecodeAndSample"));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  absl::StatusOr<DeviceSampler::Variant> ran = RunDecodeStep(batch, set, /*sample=*/true);
  if (!ran.ok()) return ran.status();
  LINSERVE_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(step_done_[static_cast<size_t>(set)].get(), stream_.get()));
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  set_items_[static_cast<size_t>(set)].assign(batch.begin(), batch.end());
  launched_.push_back(Launched{
      .out = out, .rows = batch.size(), .logprobs = ran->logprobs, .set = set, .outcome = {}});
  return absl::OkStatus();
}

absl::Status CudaBackendImpl::CollectSamples() {
  if (launched_.empty()) {
    return absl::FailedPreconditionError("CollectSamples: no step is in flight");
  }
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  Launched& step = launched_.front();
  if (!step.outcome.has_value()) {
    // Only this step: the one launched after it may still run.
    const cudaError_t waited =
        cudaEventSynchronize(step_done_[static_cast<size_t>(step.set)].get());
    absl::Status outcome =
        waited == cudaSuccess
            ? absl::OkStatus()
            : cuda::CudaErrorToStatus(waited, "cudaEventSynchronize", __FILE__, __LINE__);
    if (outcome.ok()) sampler_.CopySamples(step.rows, step.logprobs, step.out, step.set);
    step.outcome = std::move(outcome);
  }
  absl::Status outcome = *std::move(step.outcome);
  launched_.pop_front();
  return outcome;
}

absl::Status CudaBackendImpl::DecodeAndSample(absl::Span<const DecodeItem> batch,
                                              const SampleOutput& out) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckBatch(batch));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  SetSampleRows(batch);
  LINSERVE_RETURN_IF_ERROR(
      sampler_.CheckOutput(sample_slots_, sample_masks_, out, "DecodeAndSample"));
  absl::StatusOr<DeviceSampler::Variant> ran = RunDecodeStep(batch, 0, /*sample=*/true);
  if (!ran.ok()) return ran.status();
  LINSERVE_RETURN_IF_ERROR(Synchronize());
  sampler_.CopySamples(batch.size(), ran->logprobs, out, /*set=*/0);
  for (const DecodeItem& item : batch) pool_.Advance(item.slot, 1);
  return absl::OkStatus();
}

// ---- Prefill ---------------------------------------------------------------------------

absl::Status CudaBackendImpl::PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                               const SampleOutput& out,
                                               const uint32_t* allowed_tokens) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckPrefill(slot, tokens, 0));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  sample_slots_.assign(1, slot.value);
  sample_masks_.assign(1, allowed_tokens);
  LINSERVE_RETURN_IF_ERROR(
      sampler_.CheckOutput(sample_slots_, sample_masks_, out, "PrefillAndSample"));
  LINSERVE_RETURN_IF_ERROR(
      prefill_.Feed(stream_.get(), slot, tokens, nullptr, nullptr, /*last_on_device=*/true));
  return SampleAndCopy(out);
}

absl::Status CudaBackendImpl::Prefill(SlotId slot, absl::Span<const TokenId> tokens,
                                      absl::Span<float> logits) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckPrefill(slot, tokens, static_cast<int64_t>(logits.size())));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = config_.vocab_size;
  const bool all_logits = static_cast<int64_t>(logits.size()) == n * vocab;
  const bool last_logits = static_cast<int64_t>(logits.size()) == vocab;
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  return prefill_.Feed(stream_.get(), slot, tokens, all_logits ? logits.data() : nullptr,
                       last_logits ? logits.data() : nullptr, /*last_on_device=*/false);
}

absl::Status CudaBackendImpl::PrefillBatch(absl::Span<const PrefillItem> batch,
                                           const SampleOutput& out) {
  LINSERVE_RETURN_IF_ERROR(pool_.CheckPrefillBatch(batch));
  LINSERVE_RETURN_IF_ERROR(SetDevice());
  LINSERVE_RETURN_IF_ERROR(FinishLaunched());
  sample_slots_.clear();
  sample_masks_.clear();
  for (const PrefillItem& item : batch) {
    if (!item.sample) continue;
    sample_slots_.push_back(item.slot.value);
    sample_masks_.push_back(item.allowed_tokens);
  }
  LINSERVE_RETURN_IF_ERROR(sampler_.CheckOutput(sample_slots_, sample_masks_, out, "PrefillBatch"));
  LINSERVE_RETURN_IF_ERROR(prefill_.FeedBatch(stream_.get(), batch));
  if (sample_slots_.empty()) return absl::OkStatus();
  // The sampler reads each row's slot from the device row inputs (the pinned ones are free
  // again).
  const RowInputs& host = ws_.staging[0].rows;
  std::copy(sample_slots_.begin(), sample_slots_.end(), host.slots);
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ws_.device_rows.slots, host.slots,
                                                sample_slots_.size() * sizeof(int32_t),
                                                cudaMemcpyHostToDevice, stream_.get()));
  return SampleAndCopy(out);
}

// ---- Creation --------------------------------------------------------------------------

// Makes `device` current and sets up, in this order, what the backend runs on: the stream and
// cuBLASLt, the weights, the layer components, then the workspace (whose size check accounts
// for the weights, and which holds the components' scratch).
absl::StatusOr<DeviceParts> SetUpDevice(const Model& model, const BackendOptions& options,
                                        int32_t device, int32_t capacity) {
  const ModelConfig& config = model.config;
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  DeviceParts parts;
  cudaDeviceProp properties{};
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
  parts.description = absl::StrFormat("%s (sm_%d%d, %d SMs, %s)", properties.name, properties.major,
                                      properties.minor, properties.multiProcessorCount,
                                      FormatBytes(properties.totalGlobalMem));
  absl::StatusOr<cuda::Stream> stream = cuda::Stream::Create();
  if (!stream.ok()) return stream.status();
  parts.stream = *std::move(stream);
  absl::StatusOr<cuda::Stream> copy_stream = cuda::Stream::Create();
  if (!copy_stream.ok()) return copy_stream.status();
  parts.copy_stream = *std::move(copy_stream);
  for (absl::Span<cuda::Event> events : {absl::MakeSpan(parts.step_done),
                                          absl::MakeSpan(parts.read_staged),
                                          absl::MakeSpan(parts.read_landed)}) {
    for (cuda::Event& event : events) {
      absl::StatusOr<cuda::Event> created = cuda::Event::Create();
      if (!created.ok()) return created.status();
      event = *std::move(created);
    }
  }
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(kGemmWorkspaceBytes);
  if (!gemm.ok()) return gemm.status();
  parts.gemm = *std::move(gemm);
  const cuda::DType dtype = WeightDType(options.weight_precision);
  absl::StatusOr<CudaWeights> weights = UploadWeights(model, dtype, parts.stream.get());
  if (!weights.ok()) return weights.status();
  parts.weights = *std::move(weights);
  ScratchPlan scratch;
  parts.layers = CreateCudaLayers({.model = model,
                                   .options = options,
                                   .dtype = dtype,
                                   .max_rows = ActivationRows(options),
                                   .segment = CudaPrefillSegment(options),
                                   .gemm = *parts.gemm,
                                   .scratch = scratch},
                                  parts.weights);
  absl::StatusOr<CudaWorkspace> workspace =
      AllocateWorkspace(config, options, capacity, ActivationRows(options), scratch, dtype,
                        parts.description, static_cast<int64_t>(parts.weights.buffer.size()));
  if (!workspace.ok()) return workspace.status();
  parts.workspace = *std::move(workspace);
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(
    const Model& model, const BackendOptions& requested, const CudaBackendOptions& cuda_options) {
  absl::StatusOr<WeightPrecision> precision =
      CudaWeightPrecision(requested.weight_precision, model.config.weight_format);
  if (!precision.ok()) return precision.status();
  BackendOptions options = requested;
  options.weight_precision = *precision;
  const ModelConfig& config = model.config;
  LINSERVE_RETURN_IF_ERROR(CheckCudaStatePrecision(options.state_precision, config));
  const int64_t slot_bytes =
      config.StateFloatsPerSlot() * StateElementBytes(options.state_precision);
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
  absl::StatusOr<DeviceParts> parts = SetUpDevice(model, options, cuda_options.device, *capacity);
  if (!parts.ok()) return parts.status();
  auto backend = std::make_unique<CudaBackendImpl>(config, options, cuda_options, *capacity,
                                                   *std::move(parts));
  LINSERVE_RETURN_IF_ERROR(backend->Initialize());
  const CudaMemoryUse use = backend->memory_use();
  spdlog::info(
      "cuda backend: {}; weights {} ({}), {} slots of {} {} state ({}), sampler {}, "
      "activations {}",
      backend->device_description(), FormatBytes(use.weights_bytes),
      std::string(cuda::DTypeName(WeightDType(options.weight_precision))), *capacity,
      FormatBytes(slot_bytes), std::string(StatePrecisionName(options.state_precision)),
      FormatBytes(use.state_pool_bytes), FormatBytes(use.sampler_bytes),
      FormatBytes(use.workspace_bytes));
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

int CudaPrefillSegment(const BackendOptions& options) {
  constexpr int kPrefillSegment = 2048;
  return std::max(options.prefill_chunk_size,
                  kPrefillSegment / options.prefill_chunk_size * options.prefill_chunk_size);
}

}  // namespace linserve
