// The linear_attention mixer (model/layers/linear_attention.h) on the CPU, and the recurrence
// every linear-attention kind shares (cpu_linear_attention.h).

#include "model/backend/cpu/cpu_linear_attention.h"

#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "model/backend/cpu/cpu_projected_mixer.h"
#include "model/layers/linear_attention.h"

namespace linserve {
namespace {

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

class CpuAttentionMixer final : public CpuProjectedMixer {
 public:
  CpuAttentionMixer(const CpuLayerContext& context, const LayerWeights& w, int64_t state_offset,
                    const cpu::AttentionShape& shape, CpuFeatureMap phi)
      : CpuProjectedMixer(context, w, state_offset, {"attn.q_proj", "attn.k_proj", "attn.v_proj"},
                          "attn.o_proj"),
        chunk_(context.options.prefill_chunk_size),
        shape_(shape),
        phi_(std::move(phi)),
        layer_states_(static_cast<size_t>(context.options.max_batch_size)) {
    const int64_t phi_floats = int64_t{context.max_rows} * shape.heads * shape.feature_dim;
    workspace_.Reserve(kPhiQ(), phi_floats);
    workspace_.Reserve(kPhiK(), phi_floats);
    workspace_.Reserve(kChunkScratch(),
                       cpu::LinearAttentionChunkScratchFloats(chunk_, context.threads));
  }

 private:
  void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) override {
    const int rows = pass.rows;
    float* phi_q = workspace_.buffer(kPhiQ());
    float* phi_k = workspace_.buffer(kPhiK());
    const float* v = inputs[2];
    const int64_t vectors = static_cast<int64_t>(rows) * shape_.heads;
    phi_(inputs[0], vectors, phi_q);
    phi_(inputs[1], vectors, phi_k);
    if (pass.prefill) {
      // Every piece in one parallel loop over (piece, head).
      PassPrefillRows(pass, state_offset_, prefill_rows_);
      cpu::LinearAttentionPrefill(shape_, prefill_rows_.data(),
                                  static_cast<int>(prefill_rows_.size()), static_cast<int>(chunk_),
                                  phi_q, phi_k, v, out, workspace_.buffer(kChunkScratch()),
                                  threads_);
    } else {
      for (int i = 0; i < rows; ++i) layer_states_[i] = State(pass, pass.decode_slots[i]);
      cpu::LinearAttentionDecode(shape_, rows, phi_q, phi_k, v, layer_states_.data(), out,
                                 threads_);
    }
  }

  // Workspace buffers after the projections'.
  int kPhiQ() const { return FirstCoreBuffer(); }
  int kPhiK() const { return FirstCoreBuffer() + 1; }
  int kChunkScratch() const { return FirstCoreBuffer() + 2; }

  const int64_t chunk_;
  const cpu::AttentionShape shape_;
  const CpuFeatureMap phi_;
  std::vector<float*> layer_states_;            // per decode row: its slot's slice
  std::vector<cpu::PrefillRows> prefill_rows_;  // a prefill pass's pieces
};

}  // namespace

std::unique_ptr<CpuMixer> CreateCpuAttentionMixer(const CpuLayerContext& context,
                                                  const LayerWeights& weights, int64_t state_offset,
                                                  const cpu::AttentionShape& shape,
                                                  CpuFeatureMap phi) {
  return std::make_unique<CpuAttentionMixer>(context, weights, state_offset, shape, std::move(phi));
}

std::unique_ptr<CpuMixer> CreateCpuLinearAttention(const CpuLayerContext& context,
                                                   const ComponentSpec& spec,
                                                   const LayerWeights& weights,
                                                   int64_t state_offset) {
  const LinearAttentionParams p = LinearAttentionParams::From(spec.params);
  const cpu::FeatureMap map = ToKernel(p.feature_map);
  const float* favor = OptionalData(weights, "attn.favor_projection");
  CpuFeatureMap phi = [map, favor, head_dim = p.head_dim, features = p.feature_dim](
                          const float* x, int64_t vectors, float* out) {
    cpu::ApplyFeatureMap(map, x, vectors, head_dim, favor, features, out);
  };
  return CreateCpuAttentionMixer(context, weights, state_offset,
                                 {p.n_heads, p.feature_dim, p.head_dim, static_cast<float>(p.eps)},
                                 std::move(phi));
}

}  // namespace linserve
