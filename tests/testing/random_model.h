// Tiny random models, in memory and on disk, for tests and benchmarks of every layer above the
// model format (CPU backend, engine, server integration tests).
#ifndef LINSERVE_TESTS_TESTING_RANDOM_MODEL_H_
#define LINSERVE_TESTS_TESTING_RANDOM_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/format/config.h"
#include "model/model.h"
#include "model/format/safetensors.h"
#include "model/format/weights.h"

namespace linserve {

// A small valid config: byte tokenizer (vocab 260: 256 bytes + 4 specials, EOS = 257), 2 layers,
// d_model 32 = 4 heads × 8, d_ff 64, pre-norm, elu_plus_one, sinusoidal positions, biases, tied.
ModelConfig TinyConfig();

// A small valid Based-shaped config (the byte tokenizer of TinyConfig, d_model 32, no position
// embeddings, rms_norm pre-norm and final norm, gated_mlp d_ff 48 silu): four layers whose
// mixers are short_conv (d_inner 32, kernel 3, conv bias), taylor_linear_attention (2 heads,
// feature_dim 4, head_dim 16), sliding_window_attention (4 heads × 8, window 4: a ring of 3
// entries, which every prompt longer than 3 tokens wraps) and short_conv again.
ModelConfig TinyBasedConfig();

// flash-linear-attention's block at a small size (the byte tokenizer of TinyConfig, d_model 32,
// untied, no position embeddings, rms_norm pre-norm and final norm, a SwiGLU gated_mlp d_ff 48):
// two gated_delta_net layers of 2 q/k heads of 8 and 4 value heads of 8, conv_size 4.
ModelConfig TinyGatedDeltaNetConfig();

// Random weights for `config` (which must pass ParseModelConfig), deterministic in `seed` on
// every platform. Not the N(0, 0.02) of GPT training recipes, which would leave a tiny model's
// attention and FFN contributions invisible next to the residual: projections are
// N(0, 1/fan_in) so every path moves the logits, LayerNorm gains are 1 + N(0, 0.1²), biases
// N(0, 0.1²), learned positions N(0, 0.5²), favor projections N(0, 1) (Performer's ω), and the
// token embedding and head are scaled so that logits have a standard deviation of about 1
// (untied) or d_model^1/4 (tied): a peaked but not one-hot softmax.
ModelWeights MakeRandomWeights(const ModelConfig& config, uint64_t seed);

// A complete in-memory model: MakeRandomWeights, the byte tokenizer (or none, for tokenizer
// "none"), directory "" and the fingerprint LoadModel would compute after
// WriteModelDirectory(dir, config, weights) with F32. Aborts with a message when `config` is
// invalid or names a tokenizer that needs files.
Model MakeRandomModel(const ModelConfig& config, uint64_t seed);

// Writes DIR/config.json and DIR/model.safetensors (weights stored as `dtype`: F32, F16 or
// BF16), creating DIR if needed. A SentencePiece config also needs DIR/tokenizer.model, which
// the caller provides.
absl::Status WriteModelDirectory(const std::string& dir, const ModelConfig& config,
                                 const ModelWeights& weights, Dtype dtype = Dtype::kF32);

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_RANDOM_MODEL_H_
