// CpuMixerHarness: the mixer of a model's first layer alone on the CPU backend, over `slots`
// sessions' state slices — decode passes, prefill passes and token-by-token steps of d_model-wide
// rows — and the small helpers the mixer kinds' unit tests share (relative error, random rows).
#ifndef LINSERVE_TESTS_TESTING_CPU_MIXER_HARNESS_H_
#define LINSERVE_TESTS_TESTING_CPU_MIXER_HARNESS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/model.h"

namespace linserve {

class CpuMixerHarness {
 public:
  // A random model of `config` (MakeRandomModel(config, seed)), `edit` applied to its first
  // layer's weights before the layer is built; prefill chunks of `chunk` tokens, passes of at
  // most `max_rows` rows.
  CpuMixerHarness(const ModelConfig& config, int slots, uint64_t seed, int chunk = 64,
                  int max_rows = 160, const std::function<void(LayerWeights&)>& edit = nullptr);
  CpuMixerHarness(const CpuMixerHarness&) = delete;
  CpuMixerHarness& operator=(const CpuMixerHarness&) = delete;

  // One decode pass: row i of `x` is the next token of slots[i]; returns the rows' outputs.
  std::vector<float> Decode(absl::Span<const int32_t> slots, absl::Span<const float> x);
  // One prefill pass of the rows of `x` for `slot`.
  std::vector<float> Prefill(int32_t slot, absl::Span<const float> x);
  // Every row of `x` a decode step of `slot`, one after another.
  std::vector<float> Steps(int32_t slot, absl::Span<const float> x);
  // Slot `slot`'s state.
  std::vector<float> State(int32_t slot) const;

  Model model;
  BackendOptions options;
  CpuWorkspace workspace;
  CpuLayers layers;
  int64_t state_floats = 0;
  std::vector<float> states;  // every slot's, one after another
};

// max|a − b| / max|b| (max|a − b| where b is all zero; infinite where the sizes differ).
double RelativeError(absl::Span<const float> a, absl::Span<const double> b);

std::vector<double> ToDouble(absl::Span<const float> x);

// `rows` rows of `width` standard normal floats.
std::vector<float> RandomRows(int width, int rows, uint64_t seed);

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_CPU_MIXER_HARNESS_H_
