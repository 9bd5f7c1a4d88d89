// The linear_attention mixer (model/layers/linear_attention.h) on the CPU: the q/k/v GEMMs over
// all rows of a pass, φ, the recurrence per session (chunked for prefill, one step for decode)
// and the output projection added to the residual.

#include "model/backend/cpu/cpu_layer.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear_attention.h"
#include "kernels/cpu/packed_linear.h"
#include "model/layers/linear_attention.h"

namespace linserve {
namespace {

// Workspace buffers (CpuWorkspace indices).
enum Buffer { kQ, kK, kV, kPhiQ, kPhiK, kAttn, kChunkScratch };

cpu::FeatureMap ToKernel(FeatureMap m) {
  switch (m) {
    case FeatureMap::kEluPlusOne:
      return cpu::FeatureMap::kEluPlusOne;
    case FeatureMap::kRelu:
      return cpu::FeatureMap::kRelu;
    case FeatureMap::kExp:
      return cpu::FeatureMap::kExp;
    case FeatureMap::kFavorPlus:
      return cpu::FeatureMap::kFavorPlus;
  }
  return cpu::FeatureMap::kEluPlusOne;
}

class CpuLinearAttention final : public CpuMixer {
 public:
  CpuLinearAttention(const CpuLayerContext& context, const LinearAttentionParams& p,
                     const LayerWeights& w, int64_t state_offset)
      : w_(w),
        workspace_(context.workspace),
        threads_(context.threads),
        chunk_(context.options.prefill_chunk_size),
        d_model_(context.model.config.d_model),
        params_(p),
        shape_{p.n_heads, p.feature_dim, p.head_dim, static_cast<float>(p.eps)},
        feature_map_(ToKernel(p.feature_map)),
        state_offset_(state_offset),
        q_(PackWeights(context, w.At("attn.q_proj.weight"))),
        k_(PackWeights(context, w.At("attn.k_proj.weight"))),
        v_(PackWeights(context, w.At("attn.v_proj.weight"))),
        o_(PackWeights(context, w.At("attn.o_proj.weight"))),
        layer_states_(static_cast<size_t>(context.options.max_batch_size)) {
    const int64_t rows = context.max_rows;
    const int64_t hd = int64_t{p.n_heads} * p.head_dim;
    const int64_t hf = int64_t{p.n_heads} * p.feature_dim;
    for (Buffer b : {kQ, kK, kV, kAttn}) workspace_.Reserve(b, rows * hd);
    for (Buffer b : {kPhiQ, kPhiK}) workspace_.Reserve(b, rows * hf);
    workspace_.Reserve(kChunkScratch,
                       cpu::LinearAttentionChunkScratchFloats(chunk_, context.threads));
  }

  void Forward(const float* in, const CpuPass& pass, float* residual) override {
    using cpu::Linear;
    using cpu::LinearOutput;
    const int rows = pass.rows;
    const int64_t d = d_model_;
    const int64_t hd = int64_t{params_.n_heads} * params_.head_dim;
    const cpu::Activation none = cpu::Activation::kNone;
    float* q = workspace_.buffer(kQ);
    float* k = workspace_.buffer(kK);
    float* v = workspace_.buffer(kV);
    float* phi_q = workspace_.buffer(kPhiQ);
    float* phi_k = workspace_.buffer(kPhiK);
    float* attn = workspace_.buffer(kAttn);
    Linear(in, rows, d, q_, OptionalData(w_, "attn.q_proj.bias"), none, LinearOutput::kStore, q, hd,
           threads_);
    Linear(in, rows, d, k_, OptionalData(w_, "attn.k_proj.bias"), none, LinearOutput::kStore, k, hd,
           threads_);
    Linear(in, rows, d, v_, OptionalData(w_, "attn.v_proj.bias"), none, LinearOutput::kStore, v, hd,
           threads_);
    const float* favor = OptionalData(w_, "attn.favor_projection");
    const int64_t vectors = static_cast<int64_t>(rows) * params_.n_heads;
    cpu::ApplyFeatureMap(feature_map_, q, vectors, params_.head_dim, favor, params_.feature_dim,
                         phi_q);
    cpu::ApplyFeatureMap(feature_map_, k, vectors, params_.head_dim, favor, params_.feature_dim,
                         phi_k);
    if (pass.prefill) {
      // Every piece in one parallel loop over (piece, head).
      PassPrefillRows(pass, state_offset_, prefill_rows_);
      cpu::LinearAttentionPrefill(shape_, prefill_rows_.data(),
                                  static_cast<int>(prefill_rows_.size()), static_cast<int>(chunk_),
                                  phi_q, phi_k, v, attn, workspace_.buffer(kChunkScratch),
                                  threads_);
    } else {
      for (int i = 0; i < rows; ++i) layer_states_[i] = State(pass, pass.decode_slots[i]);
      cpu::LinearAttentionDecode(shape_, rows, phi_q, phi_k, v, layer_states_.data(), attn,
                                 threads_);
    }
    Linear(attn, rows, hd, o_, OptionalData(w_, "attn.o_proj.bias"), none,
           LinearOutput::kAccumulate, residual, d, threads_);
  }

 private:
  float* State(const CpuPass& pass, int32_t slot) const {
    return pass.states + slot * pass.state_floats + state_offset_;
  }

  const LayerWeights& w_;
  CpuWorkspace& workspace_;
  const int threads_;
  const int64_t chunk_;
  const int64_t d_model_;
  const LinearAttentionParams params_;
  const cpu::AttentionShape shape_;
  const cpu::FeatureMap feature_map_;
  const int64_t state_offset_;
  const cpu::PackedMatrix q_, k_, v_, o_;
  std::vector<float*> layer_states_;  // per decode row: its slot's slice
  std::vector<cpu::PrefillRows> prefill_rows_;  // a prefill pass's pieces
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuLinearAttention(const CpuLayerContext& context,
                                                   const ComponentSpec& spec,
                                                   const LayerWeights& weights,
                                                   int64_t state_offset) {
  return std::make_unique<CpuLinearAttention>(context, LinearAttentionParams::From(spec.params),
                                              weights, state_offset);
}

}  // namespace linserve
