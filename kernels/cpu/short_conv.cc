#include "kernels/cpu/short_conv.h"

#include <algorithm>

#include "kernels/cpu/elementwise.h"

namespace linserve::cpu {

void ShortConvStep(const float* u, const float* gate, int64_t channels, int kernel,
                   const float* taps, const float* bias, float* history, float* y) {
  std::fill(y, y + channels, 0.0f);
  for (int j = 0; j + 1 < kernel; ++j) {
    const float* t = taps + j * channels;
    const float* h = history + j * channels;
    for (int64_t ch = 0; ch < channels; ++ch) y[ch] += t[ch] * h[ch];
  }
  const float* last = taps + static_cast<int64_t>(kernel - 1) * channels;
  for (int64_t ch = 0; ch < channels; ++ch) y[ch] += last[ch] * u[ch];
  if (bias != nullptr) {
    for (int64_t ch = 0; ch < channels; ++ch) y[ch] += bias[ch];
  }
  ApplyActivation(Activation::kSilu, y, channels);
  if (gate != nullptr) {
    for (int64_t ch = 0; ch < channels; ++ch) y[ch] *= gate[ch];
  }
  // kernel − 1 rows of history: drop the oldest, append u.
  std::copy(history + channels, history + (kernel - 1) * channels, history);
  std::copy(u, u + channels, history + (kernel - 2) * channels);
}

}  // namespace linserve::cpu
