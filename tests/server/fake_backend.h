// FakeBackend: a Backend with the exact contracts of the real ones (slot pool, positions,
// Prefill == token-by-token Decode, batch-independent logits) but a trivial, fast "model", so
// that engine tests run thousands of steps without weights. It can also fail on demand, hold a
// Decode call until released, and record the sequence of calls it received.
#ifndef LINSERVE_TESTS_SERVER_FAKE_BACKEND_H_
#define LINSERVE_TESTS_SERVER_FAKE_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/backend/backend.h"
#include "model/format/config.h"
#include "model/backend/host_sampling.h"

namespace linserve {

class FakeBackend : public Backend {
 public:
  // One call the backend received. A PrefillBatch call is recorded, then its items as the
  // Prefill calls the default Backend::PrefillBatch makes.
  struct Call {
    enum Kind { kPrefill, kDecode, kPrefillBatch } kind;
    int32_t size;       // tokens prefilled (in all, for a batch), or sessions decoded
    int32_t items = 1;  // sessions of a PrefillBatch
  };

  // Every token t updates each state float s_i <- 0.75·s_i + table(t, i) (|table(t, i)| for
  // the z floats of the StateBlob layout, which stay >= 0 as in a real state) and advances the
  // position; logits are a fixed mix of state floats, scaled so sampling is neither uniform nor
  // one-hot. With `eos_after` >= 0, a session at position >= eos_after puts all mass on EOS.
  FakeBackend(const ModelConfig& config, int32_t slots, int64_t eos_after = -1);

  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return config_; }
  int32_t slot_capacity() const override { return static_cast<int32_t>(slots_.size()); }
  int32_t free_slots() const override;
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
  // Reads at the start, as the default; counted apart from ReadSlot (reads_started()). With
  // set_reads_land_when_waited, FinishedReads(false) hands over nothing (a device that has not
  // copied yet), so that only a waiting FinishedReads lands them.
  absl::StatusOr<int64_t> StartReadSlot(SlotId slot) override;
  std::vector<SlotRead> FinishedReads(bool wait) override;
  // Sampling as the CPU backend does it (model/backend/host_sampling.h) over the fake logits; the
  // calls, gate and failures are those of Decode and Prefill.
  absl::Status StartSampling(SlotId slot, const SamplingParams& params, int32_t top_logprobs,
                             absl::Span<const TokenId> observed) override;
  absl::Status SetSeenCounts(SlotId slot, absl::Span<const TokenCount> counts) override;
  absl::Status DecodeAndSample(absl::Span<const DecodeItem> batch,
                               const SampleOutput& out) override;
  absl::Status PrefillAndSample(SlotId slot, absl::Span<const TokenId> tokens,
                                const SampleOutput& out, const uint32_t* allowed_tokens) override;
  absl::Status PrefillBatch(absl::Span<const PrefillItem> batch, const SampleOutput& out) override;

  // Thread-safe controls for tests.
  // Every later Prefill/Decode fails with INTERNAL while set.
  void set_fail(bool fail);
  // Every later StartSampling fails with INTERNAL while set.
  void set_fail_start_sampling(bool fail);
  void set_reads_land_when_waited(bool only_then);
  // While closed, Decode blocks (on the engine thread) until Open().
  void CloseGate();
  void Open();
  // Whether a Decode call is currently blocked at the closed gate.
  bool WaitingAtGate() const;
  // With the gate closed and a Decode call waiting at it: lets exactly that call through and
  // returns once the engine's next Decode call waits at the gate (one engine step, however
  // the threads are scheduled).
  void Step();
  std::vector<Call> calls() const;
  // ReadSlot calls (synchronous reads), and StartReadSlot calls, so far.
  int64_t slot_reads() const;
  int64_t reads_started() const;

 private:
  struct Slot {
    bool allocated = false;
    int64_t position = 0;
    std::vector<float> state;
  };
  absl::Status Check(SlotId slot) const;
  absl::Status Read(SlotId slot, StateBlob& out) const;
  void Feed(Slot& slot, TokenId token) const;
  void Logits(const Slot& slot, absl::Span<float> out) const;

  ModelConfig config_;
  const int64_t eos_after_;
  std::vector<Slot> slots_;
  HostSampling sampling_;
  std::vector<float> logits_;
  std::vector<SlotId> batch_slots_;
  std::vector<const uint32_t*> batch_masks_;

  mutable absl::Mutex mu_;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_start_sampling_ ABSL_GUARDED_BY(mu_) = false;
  bool gate_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_at_gate_ ABSL_GUARDED_BY(mu_) = false;
  int64_t passes_ ABSL_GUARDED_BY(mu_) = 0;  // Decode calls Step() lets through the closed gate
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  mutable int64_t slot_reads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reads_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_land_when_waited_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<SlotRead> finished_reads_;  // started, not handed over
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_FAKE_BACKEND_H_
