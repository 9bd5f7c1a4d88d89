// DeviceSampler: a CudaBackend's sampling. Each slot's parameters, MT19937-64 and seen-token
// counts live on the device, so that a step's picks (kernels/cuda/sampling.h) and the logprobs
// of the rows that ask for them (kernels/cuda/logprobs.h) are made there: only tokens, and
// those rows' 1 + 2n numbers, cross PCIe. For the same logits, seed and token masks the picks
// are the host Sampler's except when a cumulative sum lands within rounding of top_p or of the
// draw. A step's masks travel through the workspace's pinned mask buffers with its other inputs;
// a step without any costs nothing more. A step launches the argmax kernel only when a row is
// greedy and the draw kernel only when one is not. A decode step's sampling is split so that it
// can live in the step's CUDA graph: Stage (host staging) then EnqueueSampling (capturable).
//
// Seen counts cost work only for slots whose parameters use a penalty: a Start without one keeps
// its observed tokens on the host (pending, at most vocab of them; past that they are counted
// on the device) and launches no count kernel; a later Start with a penalty counts them first,
// so the counts are always the slot's whole history when a penalty reads them.
//
// Tokens to count, dense counts and logit biases cross PCIe through an arena of pinned memory
// (CudaWorkspace::count_staging, CountArenaEntries), filled front to back and copied in stream
// order: a Start with a penalty or a SetSeenCounts waits for nothing unless the arena is full,
// and then for the last copy out of it (and so for the work queued on the stream before it).
//
// Enqueues on the stream it is given (always the backend's one stream) and does not wait.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_DEVICE_SAMPLER_H_
#define LINSERVE_MODEL_BACKEND_CUDA_DEVICE_SAMPLER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/row_masks.h"
#include "kernels/cuda/sampling.h"
#include "model/backend/backend.h"
#include "model/backend/cuda/cuda_workspace.h"
#include "model/backend/sampler.h"

namespace linserve {

class DeviceSampler {
 public:
  // Keeps a reference to `workspace`: its sampler state, logits, row inputs, sample buffers and
  // count arena.
  DeviceSampler(int32_t capacity, int32_t vocab, const CudaWorkspace& workspace);

  // Zeroes the slot's seen counts; it has no parameters until the next Start.
  absl::Status EnqueueClear(cudaStream_t stream, int32_t slot);
  void Forget(int32_t slot);
  // Copies `from`'s seen counts to `to`, and its parameters, logit biases and random stream when
  // it has them.
  // Once the stream has run it, CopySettings(from, to) makes `to` sample as `from` does.
  absl::Status EnqueueCopy(cudaStream_t stream, int32_t from, int32_t to) const;
  void CopySettings(int32_t from, int32_t to);

  // Sets the slot's parameters (already validated, logit biases in the vocabulary) and seeds its
  // stream on the device (one kernel, its arguments by value), uploads its logit biases when it
  // has any (through the arena), and adds `observed` (tokens in the vocabulary) to its counts:
  // pending while no penalty needs them, else with the pending ones through the arena and the
  // count kernel (StartCounts says which).
  absl::Status Start(cudaStream_t stream, int32_t slot, const SamplingParams& params,
                     int32_t top_logprobs, absl::Span<const TokenId> observed);
  // Replaces the slot's seen counts (tokens in the vocabulary, counts >= 0, summed per token and
  // saturated at int32), through the arena.
  absl::Status SetSeenCounts(cudaStream_t stream, int32_t slot,
                             absl::Span<const TokenCount> counts);

  // Checks `out` for rows sampled from `slots` (tokens per row; logprob spans when a slot asks
  // for them), that every slot has had Start and that every row's token mask (`masks`: one per
  // row, nullptr = none) allows a token of the vocabulary.
  absl::Status CheckOutput(absl::Span<const int32_t> slots, absl::Span<const uint32_t* const> masks,
                           const SampleOutput& out, absl::string_view what) const;
  // What a sampling pass runs: the argmax (a greedy row), the draw (a sampled row), the token
  // masks (a masked row), the logprobs (a row whose slot asks for them). A decode step's graph
  // is captured per variant (key(), in [1, kVariants)) and batch bucket.
  struct Variant {
    bool greedy = false;
    bool sampled = false;
    bool masks = false;
    bool logprobs = false;
    int key() const {
      return (greedy ? 1 : 0) | (sampled ? 2 : 0) | (masks ? 4 : 0) | (logprobs ? 8 : 0);
    }
  };
  static constexpr int kVariants = 16;

  // Stages the sampling of `slots`' rows padded to `rows` rows (>= slots.size(); a padding row,
  // whose device slot is negative, picks nothing) in pinned staging set `set`: each row's mask
  // index and logprob count, and the masked rows' masks (`masks` as CheckOutput's), whose upload
  // is enqueued here when a row has one: one copy of the masked rows only, the one part of a
  // step's sampling outside its graph. The set's previous work has run (its pinned buffers are
  // reused). Says what EnqueueSampling must run.
  absl::StatusOr<Variant> Stage(cudaStream_t stream, absl::Span<const int32_t> slots,
                                absl::Span<const uint32_t* const> masks, int rows, int set);
  // Enqueues what Stage staged in set `set` for logits rows [0, rows) and the slots on the
  // device row inputs: the mask index upload, the picks, the logprobs, and their copies to the
  // set's pinned samples. Capturable in a CUDA graph: the same (variant, rows, set) enqueues the
  // same operations on the same buffers.
  absl::Status EnqueueSampling(cudaStream_t stream, const Variant& variant, int rows,
                               int set) const;
  // Stage and EnqueueSampling of `slots`' rows, unpadded (a prefill's sampling); says whether
  // any row asked for logprobs.
  absl::StatusOr<bool> Enqueue(cudaStream_t stream, absl::Span<const int32_t> slots,
                               absl::Span<const uint32_t* const> masks, int set);
  // Copies the pinned samples of `rows` rows in staging set `set` to `out` (the stream has run
  // that Enqueue's work).
  void CopySamples(size_t rows, bool logprobs, const SampleOutput& out, int set) const;

 private:
  int32_t* counts(int32_t slot) const {
    return ws_.sampler.seen_counts + static_cast<int64_t>(slot) * vocab_;
  }
  int32_t* biases(int32_t slot) const {
    return ws_.sampler.biases + static_cast<int64_t>(slot) * cuda::LogitBiasEntries(vocab_);
  }
  // Uploads params.logit_bias (non-empty) as the slot's biases, through the arena.
  absl::Status UploadBiases(cudaStream_t stream, int32_t slot, const SamplingParams& params);
  // Whether Start(slot, params, ..., observed) counts on the device.
  bool StartCounts(int32_t slot, const SamplingParams& params,
                   absl::Span<const TokenId> observed) const;
  // Counts `tokens` into the slot's device counts, through the arena.
  absl::Status CountOnDevice(cudaStream_t stream, int32_t slot, absl::Span<const TokenId> tokens);
  // Stages `values` (at most CountArenaEntries(vocab)) in the arena and enqueues their copy to
  // `dest` (nullptr: the arena's device mirror); returns where they are on the device. Waits for
  // the last copy out of the arena (and the work before it) only when it is full.
  absl::StatusOr<int32_t*> Upload(cudaStream_t stream, absl::Span<const int32_t> values,
                                  int32_t* dest);
  // Stages the rows' masks in pinned set `set` (index -1 for the rows without one and the
  // padding up to `rows`) and enqueues the upload of the masked rows' words; says whether a row
  // has a mask (nothing is staged or uploaded when none has).
  absl::StatusOr<bool> StageMasks(cudaStream_t stream, absl::Span<const uint32_t* const> masks,
                                  int rows, int set) const;

  const int32_t vocab_;
  const CudaWorkspace& ws_;
  std::vector<char> ready_;            // per slot: Start since cleared
  std::vector<int32_t> top_logprobs_;  // per slot
  std::vector<char> greedy_;           // per slot: temperature 0 since the last Start
  std::vector<int32_t> bias_counts_;   // per slot: logit biases since the last Start
  std::vector<int32_t> bias_staging_;  // Start's upload of logit biases, LogitBiasEntries
  // Per slot: observed tokens not yet in the device counts (the slot's parameters use no
  // penalty), fewer than vocab.
  std::vector<std::vector<TokenId>> pending_;
  std::vector<int32_t> dense_counts_;  // SetSeenCounts staging, vocab entries
  const int64_t arena_entries_;        // CountArenaEntries(vocab)
  int64_t arena_used_ = 0;             // entries staged since the arena was last emptied
  cuda::Event arena_copied_;           // recorded after the latest copy out of the arena
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_DEVICE_SAMPLER_H_
