// CpuProjectedMixer: the shape every mixer kind has on the CPU, written once. The pass's rows go
// through the kind's input projections (each a Linear over all rows, its bias when the layer has
// one), a core mixes positions over the projected rows and advances each slot's slice of the
// state, and the output projection adds the core's rows to the residual. A kind's file names its
// projections (the tensor prefixes its declaration lists) and implements the core.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_PROJECTED_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_PROJECTED_MIXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/packed_matrix.h"
#include "model/backend/cpu/cpu_layer.h"

namespace linserve {

class CpuProjectedMixer : public CpuMixer {
 public:
  // `inputs` and `output` are tensor prefixes: projection p reads `p.weight` ([width, in]) and,
  // when the layer holds it, `p.bias`. The inputs read the layer's d_model-wide rows; the
  // output's in_features is the core's width.
  CpuProjectedMixer(const CpuLayerContext& context, const LayerWeights& weights,
                    int64_t state_offset, const std::vector<std::string>& inputs,
                    const std::string& output);

  void Forward(const float* in, const CpuPass& pass, float* residual) final;

 protected:
  // Mixes the pass: inputs[i] holds pass.rows rows of input projection i (its width each);
  // fills `out` with pass.rows rows of the core's width.
  virtual void Core(const CpuPass& pass, absl::Span<float* const> inputs, float* out) = 0;

  // Slot `slot`'s slice of this layer's state.
  float* State(const CpuPass& pass, int32_t slot) const {
    return pass.states + slot * pass.state_floats + state_offset_;
  }
  // The first workspace buffer a core may Reserve: those before it hold the projections' rows.
  int FirstCoreBuffer() const { return static_cast<int>(inputs_.size()) + 1; }

  CpuWorkspace& workspace_;
  const int threads_;
  const int64_t state_offset_;

 private:
  struct Projection {
    cpu::PackedMatrix weight;
    const float* bias;  // null: none
    int64_t width;      // out_features
  };
  Projection Make(const CpuLayerContext& context, const LayerWeights& weights,
                  const std::string& prefix) const;

  const int64_t d_model_;
  std::vector<Projection> inputs_;
  Projection output_;
  int64_t core_width_ = 0;
  std::vector<float*> buffers_;  // per input: its rows (refreshed each pass)
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_PROJECTED_MIXER_H_
