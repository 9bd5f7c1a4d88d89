// Row-wise and elementwise kernels of the linear-attention decoder (docs/architecture.md §4):
// LayerNorm, the FFN activations, the four feature maps φ and sinusoidal positions.
// Single-threaded: they are a few percent of a step and run on rows the caller already
// parallelises or batches.
#ifndef LINSERVE_KERNELS_CPU_ELEMENTWISE_H_
#define LINSERVE_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>
#include <vector>

namespace linserve::cpu {

enum class Activation { kNone, kGelu, kGeluTanh, kRelu, kSilu, kSigmoid };

// x[i] = act(x[i]); gelu uses erf, gelu_tanh the tanh approximation (PyTorch's two forms);
// silu is x · sigmoid(x), sigmoid 1 / (1 + exp(−x)).
void ApplyActivation(Activation act, float* x, int64_t n);

// y_r = (x_r − mean) / sqrt(var + eps) · gamma + beta per row (biased variance, as
// nn.LayerNorm); mean and variance are accumulated in double. y may alias x.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* gamma, const float* beta,
               float eps, float* y);

// y_r = x_r / sqrt(mean(x_r²) + eps) · gamma per row; the mean of the squares is accumulated
// in double. y may alias x.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* gamma, float eps, float* y);

// The recurrent mixers' output norm (delta rule, GLA): o ← o / sqrt(mean(o²) + eps) · weight
// (· silu(gate) when gate is not null), over n values, the sum in float as the CUDA kernels'.
void GatedRmsNorm(float* o, int64_t n, const float* weight, const float* gate, float eps);

// The gated MLP's hidden rows: a holds `rows` rows of 2·width floats (value, then gate);
// y[r][i] = a[r][i] · act(a[r][width + i]). y must not overlap a.
void GatedProduct(Activation act, const float* a, int64_t rows, int64_t width, float* y);

// Based's second-order Taylor feature map, for `vectors` contiguous vectors of `dim` floats:
//   φ(x) = [1, x / dim^¼, vec(x xᵀ) / (√2·√dim)]   (vec row-major: feature 1 + dim + i·dim + j)
// out holds `vectors` rows of 1 + dim + dim² floats. Each output depends on its own input vector
// alone, bit for bit.
void TaylorFeatureMap(const float* x, int64_t vectors, int dim, float* out);

enum class FeatureMap { kEluPlusOne, kRelu, kExp, kFavorPlus };

// out[v] = φ(x[v]) for `vectors` contiguous vectors of head_dim floats; out holds `vectors`
// rows of feature_dim floats (feature_dim == head_dim except for favor_plus).
//   elu_plus_one: x > 0 ? x + 1 : exp(x)      relu: max(x, 0)
//   exp:          exp(x − max_i x_i)
//   favor_plus:   exp(W x − ‖x‖²/2) / √feature_dim, W = favor_projection [feature_dim, head_dim]
// favor_projection is only read for favor_plus. Each output depends on its own input vector
// alone, bit for bit: no library kernel chosen by CPU model or by `vectors` is involved.
void ApplyFeatureMap(FeatureMap map, const float* x, int64_t vectors, int head_dim,
                     const float* favor_projection, int feature_dim, float* out);

// Denominators 10000^(2⌊j/2⌋/dim) of the sinusoidal position embedding, one per channel j.
std::vector<double> SinusoidalDenominators(int64_t dim);

// x[j] += sin(position / denominators[j]) for even j, cos(...) for odd j (in double).
void AddSinusoidalPosition(int64_t position, const std::vector<double>& denominators, float* x);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_ELEMENTWISE_H_
