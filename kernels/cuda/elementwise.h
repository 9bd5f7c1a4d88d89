// Host-side launchers for the row-wise kernels of a transformer step: weight conversion,
// embedding gather, fused residual-add + LayerNorm / RMSNorm, bias + activation, bias + gate.
// Every launcher enqueues on `stream` and returns the launch status; the work itself completes
// asynchronously. Matrices are row-major; "T" buffers hold the weights' element type (`dtype`).
#ifndef LINSERVE_KERNELS_CUDA_ELEMENTWISE_H_
#define LINSERVE_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace linserve::cuda {

enum class PositionKind { kLearned, kSinusoidal, kNone };
enum class ActivationKind { kGelu, kGeluTanh, kRelu, kSilu, kSigmoid };
enum class NormType { kLayerNorm, kRmsNorm };

// out[i] = T(in[i]) for i < n, rounding to nearest even.
absl::Status LaunchConvert(cudaStream_t stream, const float* in, int64_t n, DType dtype, void* out);

struct AddNormArgs {
  // r = x + (delta + delta_bias) (delta_bias only with delta), per row of `d` floats.
  const float* x = nullptr;
  const float* delta = nullptr;       // optional [rows, d]
  const float* delta_bias = nullptr;  // optional [d]
  float* sum_out = nullptr;           // optional [rows, d]: r is stored here (may alias x)
  // kLayerNorm: y = (r - mean(r)) / sqrt(var(r) + eps) * gamma + beta, var the biased (1/d)
  // variance. kRmsNorm: y = r / sqrt(mean(r²) + eps) * gamma (beta is not read).
  NormType norm = NormType::kLayerNorm;
  const float* gamma = nullptr;  // [d]
  const float* beta = nullptr;   // [d], kLayerNorm only
  float eps = 1e-5f;
  float* y = nullptr;   // optional fp32 [rows, d] (may alias x)
  void* y_t = nullptr;  // optional T [rows, d]
  int rows = 0;
  int d = 0;
  DType dtype = DType::kF32;
};
absl::Status LaunchAddNorm(cudaStream_t stream, const AddNormArgs& args);

struct EmbedArgs {
  const int32_t* tokens = nullptr;  // [rows], each in [0, vocab)
  // Launch-ahead: a row whose source is >= 0 embeds fed_tokens[source] (the previous decode
  // step's picks, still on the device) instead of tokens[row]. nullptr: every row its token.
  const int32_t* sources = nullptr;  // [rows]
  const int32_t* fed_tokens = nullptr;
  const int64_t* positions = nullptr;  // [rows], position index of each token
  const void* table = nullptr;         // T [vocab, d]
  PositionKind position = PositionKind::kNone;
  const void* position_table = nullptr;  // T [max_position, d], learned only
  int rows = 0;
  int d = 0;
  DType dtype = DType::kF32;
  float* x = nullptr;   // fp32 [rows, d]: table[token] + position embedding
  void* x_t = nullptr;  // optional T [rows, d] copy of x (the next GEMM's input)
  // Pre-norm: the first layer's norm of the embedded rows in the same kernel (LaunchAddNorm's
  // over x, no delta; its x, rows, d and dtype these). Default: none.
  bool normalize = false;
  AddNormArgs norm;
};
// Sinusoidal: pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(p / 10000^(2i/d)), computed
// in double so that it stays exact at positions in the millions. With `normalize`, bitwise
// LaunchEmbed then LaunchAddNorm(norm); INVALID_ARGUMENT when norm is not over these rows.
absl::Status LaunchEmbed(cudaStream_t stream, const EmbedArgs& args);

// out[r, c] = T(act(in[r, c] + bias[c])), bias optional. gelu is the erf form, gelu_tanh the
// tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), silu x·sigmoid(x), sigmoid
// 1 / (1 + exp(−x)).
absl::Status LaunchBiasActivation(cudaStream_t stream, const float* in, const float* bias,
                                  int64_t rows, int64_t cols, ActivationKind activation,
                                  DType dtype, void* out);

// What follows an MLP's first linear layer, fc1 (Gemm::LinearActivation): its bias and
// activation, or its gate. The hidden rows are written in the weights' type.
struct ActivationEpilogue {
  // false: hidden[r, c] = T(act(y[r, c] + bias[c])) for the product y = x · fc1ᵀ, [rows, cols].
  // true: fc1 holds 2·cols rows, value rows then gate rows, and hidden[r, c] =
  // T(act(y[r, cols + c] + bias[cols + c]) · (y[r, c] + bias[c])) (LaunchBiasGate's).
  // Default: false.
  bool gate = false;
  // Default: gelu.
  ActivationKind activation = ActivationKind::kGelu;
  // fp32 [cols] (gate: [2·cols]). Default: none.
  const float* bias = nullptr;
};

// The gated MLP's hidden rows: in holds `rows` rows of 2·width floats (value, then gate) and bias
// (optional) 2·width; with a = in[r] + bias, out[r, c] = T(a[c] · act(a[width + c])) (act one
// of LaunchBiasActivation's).
absl::Status LaunchBiasGate(cudaStream_t stream, const float* in, const float* bias, int64_t rows,
                            int64_t width, ActivationKind activation, DType dtype, void* out);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_ELEMENTWISE_H_
