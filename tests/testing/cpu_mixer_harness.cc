#include "tests/testing/cpu_mixer_harness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "tests/testing/random_model.h"

namespace linserve {

CpuMixerHarness::CpuMixerHarness(const ModelConfig& config, int slots, uint64_t seed, int chunk,
                                 int max_rows, const std::function<void(LayerWeights&)>& edit)
    : model(MakeRandomModel(config, seed)) {
  if (edit) edit(model.weights.layers[0]);
  options.max_batch_size = slots;
  options.prefill_chunk_size = chunk;
  layers = CreateCpuLayers({.model = model,
                            .options = options,
                            .threads = 2,
                            .max_rows = max_rows,
                            .workspace = workspace});
  workspace.Allocate();
  state_floats = model.config.StateFloatsPerSlot();
  states.assign(static_cast<size_t>(slots * state_floats), 0.0f);
}

std::vector<float> CpuMixerHarness::Decode(absl::Span<const int32_t> slots,
                                           absl::Span<const float> x) {
  const int rows = static_cast<int>(slots.size());
  std::vector<float> out(static_cast<size_t>(rows) * model.config.d_model, 0.0f);
  const CpuPass pass{.rows = rows,
                     .prefill = false,
                     .pieces = {},
                     .decode_slots = slots,
                     .states = states.data(),
                     .state_floats = state_floats};
  layers.layers[0].mixer->Forward(x.data(), pass, out.data());
  return out;
}

std::vector<float> CpuMixerHarness::Prefill(int32_t slot, absl::Span<const float> x) {
  const int rows = static_cast<int>(x.size() / model.config.d_model);
  std::vector<float> out(x.size(), 0.0f);
  const PrefillPiece piece{.slot = slot, .first_row = 0, .rows = rows};
  const CpuPass pass{.rows = rows,
                     .prefill = true,
                     .pieces = {&piece, 1},
                     .decode_slots = {},
                     .states = states.data(),
                     .state_floats = state_floats};
  layers.layers[0].mixer->Forward(x.data(), pass, out.data());
  return out;
}

std::vector<float> CpuMixerHarness::Steps(int32_t slot, absl::Span<const float> x) {
  const size_t d = static_cast<size_t>(model.config.d_model);
  std::vector<float> out;
  for (size_t r = 0; r < x.size() / d; ++r) {
    const std::vector<float> row = Decode({&slot, 1}, x.subspan(r * d, d));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

std::vector<float> CpuMixerHarness::State(int32_t slot) const {
  const auto begin = states.begin() + slot * state_floats;
  return {begin, begin + state_floats};
}

double RelativeError(absl::Span<const float> a, absl::Span<const double> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

std::vector<double> ToDouble(absl::Span<const float> x) { return {x.begin(), x.end()}; }

std::vector<float> RandomRows(int width, int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows) * width);
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace linserve
