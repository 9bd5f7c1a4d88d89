// One token of a depthwise causal convolution with silu, gated (the short_conv mixer, Based's
// BaseConv) or not (the delta-rule kinds' q/k/v convolutions), over a per-session history of the
// last kernel − 1 inputs.
#ifndef LINSERVE_KERNELS_CPU_SHORT_CONV_H_
#define LINSERVE_KERNELS_CPU_SHORT_CONV_H_

#include <cstdint>

namespace linserve::cpu {

// For each channel ch of `channels`:
//   c[ch] = Σ_{j<kernel} taps[j][ch] · x_j[ch] + bias[ch],  x_j = history row j for j < kernel − 1
//           and x_{kernel−1} = u (the current input); the sum runs over j in order from zero
//   y[ch] = silu(c[ch]) · gate[ch]   (silu(c[ch]) when gate is null)
// then the history moves on one token: rows 1 … kernel − 2 become rows 0 … kernel − 3 and u
// becomes row kernel − 2. taps: [kernel, channels] (tap-major); bias may be null; history:
// (kernel − 1) × channels, oldest row first. y must not overlap the inputs.
void ShortConvStep(const float* u, const float* gate, int64_t channels, int kernel,
                   const float* taps, const float* bias, float* history, float* y);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_SHORT_CONV_H_
