#include "bench/gpu/kernel_account.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/layers/delta_net.h"
#include "model/layers/ffn.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_linear_attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear_attention.h"
#include "model/layers/mamba2.h"
#include "model/layers/retention.h"
#include "model/layers/short_conv.h"
#include "model/layers/sliding_window_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {
namespace {

constexpr int64_t kF32 = 4;

// What one accounted step is: `rows` rows of the layers; decode: one row per session, each
// session's state read and written once; prefill: one session's `rows` tokens in `passes`
// passes (the weights and the state read, and the state written, once per pass) of chunks of
// `chunk` tokens.
struct Step {
  int64_t rows = 0;
  bool prefill = false;
  int64_t passes = 1;
  int64_t chunk = 0;
};

// Accumulates launches by kernel name, keeping the order of first launch.
class Account {
 public:
  Account(const Step& step, int64_t element)
      : b_(step.rows),
        w_(element),
        weight_reads_(step.prefill ? step.passes : 1),
        state_reads_(step.prefill ? step.passes : step.rows),
        few_rows_(element == 2 && step.rows <= kFusedEpilogueMaxRows) {}

  // How many times a step reads the weights, and reads and writes a state slice.
  int64_t weight_reads() const { return weight_reads_; }
  int64_t state_reads() const { return state_reads_; }

  // Whether what follows a projection of input width k runs in its kernel
  // (kFusedEpilogueMaxRows, kFusedEpilogueKMultiple).
  bool Fuses(int64_t k) const { return few_rows_ && k % kFusedEpilogueKMultiple == 0; }

  void Add(const std::string& name, const std::string& kernels, const KernelBytes& bytes,
           int64_t flops) {
    KernelCost* cost = nullptr;
    for (KernelCost& c : costs_) {
      if (c.name == name) cost = &c;
    }
    if (cost == nullptr) {
      cost = &costs_.emplace_back();
      cost->name = name;
      cost->cuda_kernels = kernels;
    }
    cost->launches += 1;
    cost->bytes.weights += bytes.weights;
    cost->bytes.state += bytes.state;
    cost->bytes.activations += bytes.activations;
    cost->bytes.logits += bytes.logits;
    cost->flops += flops;
  }

  // y[b, n] (fp32) = x[b, k] (weight type) · w[n, k]ᵀ; `outputs` columns of `out_element`
  // bytes written (a fused MLP epilogue's hidden rows; default: n fp32 columns).
  void Gemm(const std::string& name, int64_t n, int64_t k, int64_t outputs = -1,
            int64_t out_element = kF32) {
    if (outputs < 0) outputs = n;
    last_gemm_ = absl::StrCat("gemm ", name);
    last_gemm_fuses_ = Fuses(k);
    Add(last_gemm_, "",
        {.weights = weight_reads_ * n * k * w_,
         .activations = b_ * k * w_ + b_ * outputs * out_element},
        2 * b_ * n * k);
  }

  // A norm after a residual add (x += delta; y_t = norm(x)): reads x and delta, writes x and
  // y_t. Fused (Fuses of the last GEMM's k): the bytes join the last GEMM's row, whose kernel
  // runs the norm.
  void Norm(const std::string& kind, int64_t d) {
    const int64_t bytes = 3 * b_ * d * kF32 + b_ * d * w_;
    if (last_gemm_fuses_) {
      for (KernelCost& c : costs_) {
        if (c.name == last_gemm_) c.bytes.activations += bytes;
      }
      return;
    }
    Add(absl::StrCat(kind, " (+ residual add)"), "AddNormKernel", {.activations = bytes}, 0);
  }

  // A linear attention over H heads of F features and head_dim values whose q and k are key_dim
  // wide: reads the fp32 q, k, v, reads and rewrites S and z, writes o. Decode, per row and
  // head: S += φ(k)vᵀ, z += φ(k), φ(q)ᵀS and φ(q)ᵀz. Prefill in chunks of C, per token and head:
  // its part of the chunk's state (2F(Dh + 1)), the carried state's read-out (2F(Dh + 1)) and the
  // causal products within the chunk over C/2 earlier tokens on average (C·F scores, C·(Dh + 1)
  // values and denominators).
  void LinearAttention(const std::string& kind, const Step& step, int64_t heads, int64_t features,
                       int64_t key_dim, int64_t head_dim) {
    const int64_t state = heads * features * (head_dim + 1) * kF32;
    const KernelBytes bytes{
        .state = 2 * state_reads_ * state,
        .activations = b_ * heads * (2 * key_dim + head_dim) * kF32 + b_ * heads * head_dim * w_};
    if (!step.prefill) {
      Add(kind + " decode", "DecodeAttentionKernel", bytes,
          b_ * heads * features * (4 * head_dim + 3));
      return;
    }
    Add(kind + " prefill",
        "FeatureMapsKernel|ChunkSumKernel|ChunkScanKernel|ChunkOutputKernel|ChunkFinalKernel",
        bytes,
        b_ * heads * (4 * features * (head_dim + 1) + step.chunk * (features + head_dim + 1)));
  }

  std::vector<KernelCost> Take() { return std::move(costs_); }

 private:
  const int64_t b_, w_;
  const int64_t weight_reads_, state_reads_;
  const bool few_rows_;
  bool last_gemm_fuses_ = false;
  std::string last_gemm_;  // the row of the last Gemm added
  std::vector<KernelCost> costs_;
};

}  // namespace

namespace {

// The account of `step` (see Step); `what` names the caller in errors.
absl::StatusOr<std::vector<KernelCost>> Build(const ModelConfig& config, const Step& step,
                                              int64_t weight_element_bytes,
                                              const std::string& what) {
  if (weight_element_bytes != 2 && weight_element_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": weight_element_bytes ", weight_element_bytes, " is not 2 or 4"));
  }
  Account a(step, weight_element_bytes);
  const int64_t b = step.rows, w = weight_element_bytes;
  const int64_t st = a.state_reads();
  const int64_t d = config.d_model;
  const int64_t vocab = config.vocab_size;
  const bool pre = config.norm == NormPlacement::kPre;
  const std::vector<LayerSpec> layers = config.LayerList();
  // A mixer's kernels and its row's name, by step: decode's kernel or prefill's.
  auto kernels = [&](const std::string& decode, const std::string& prefill) {
    return step.prefill ? prefill : decode;
  };
  const std::string pass = step.prefill ? " prefill" : " decode";
  const std::string short_conv_kernels =
      kernels("DecodeShortConvKernel", "PrefillShortConvKernel|ShortConvAdvanceStateKernel");

  const int64_t tables = config.position == PositionEmbedding::kLearned ? 2 : 1;
  // Writes x (fp32) and the first GEMM's input in the weights' type: post-norm a copy of x,
  // pre-norm the first layer's norm of x, which the same kernel runs (reading x back).
  const bool first_norm = pre && !layers.empty();
  a.Add(first_norm ? absl::StrCat("embedding + ", layers.front().norm.kind) : "embedding",
        "EmbedKernel",
        {.weights = tables * b * d * w,
         .activations = b * d * kF32 + (first_norm ? b * d * kF32 : 0) + b * d * w},
        0);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerSpec& layer = layers[l];
    const std::string& mixer = layer.mixer.kind;
    if (mixer == "linear_attention") {
      const LinearAttentionParams p = LinearAttentionParams::From(layer.mixer.params);
      a.Gemm("qkv", 3 * p.n_heads * p.head_dim, d);
      a.LinearAttention(mixer, step, p.n_heads, p.feature_dim, p.head_dim, p.head_dim);
      a.Gemm("o", d, p.n_heads * p.head_dim);
    } else if (mixer == "taylor_linear_attention") {
      const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(layer.mixer.params);
      a.Gemm("qkv", p.n_heads * (2 * p.feature_dim + p.head_dim), d);
      a.LinearAttention(mixer, step, p.n_heads, p.Features(), p.feature_dim, p.head_dim);
      a.Gemm("o", d, p.n_heads * p.head_dim);
    } else if (mixer == "sliding_window_attention") {
      const SlidingWindowAttentionParams p =
          SlidingWindowAttentionParams::From(layer.mixer.params);
      const int64_t hd = static_cast<int64_t>(p.n_heads) * p.head_dim;
      const int64_t ring = p.window - 1;
      a.Gemm("qkv", 3 * hd, d);
      // Decode reads the ring's keys and values (a full ring: the steady state) and writes one
      // entry; a prefill pass reads the ring and rewrites it. Each token scores and sums a
      // window of keys (a full one: the steady state).
      a.Add(mixer + pass,
            kernels("DecodeKernel|AdvanceKernel",
                    "PrefillKernel|WriteRingKernel|AdvancePiecesKernel"),
            {.state = step.prefill ? 2 * st * ring * 2 * hd * kF32 : b * (ring + 1) * 2 * hd * kF32,
             .activations = b * 3 * hd * kF32 + b * hd * w},
            b * 4 * static_cast<int64_t>(p.window) * hd);
      a.Gemm("o", d, hd);
    } else if (mixer == "short_conv") {
      const ShortConvParams p = ShortConvParams::From(layer.mixer.params);
      const int64_t di = p.d_inner;
      const int64_t past = static_cast<int64_t>(p.kernel_size) - 1;
      a.Gemm("conv_in", 2 * di, d);
      // Reads u and g (fp32), reads the K−1 past rows and rewrites them shifted, writes the
      // gated output.
      a.Add(mixer + pass, short_conv_kernels,
            {.state = 2 * st * past * di * kF32, .activations = b * 2 * di * kF32 + b * di * w},
            b * 2 * static_cast<int64_t>(p.kernel_size) * di);
      a.Gemm("conv_out", d, di);
    } else if (mixer == "gated_delta_net" || mixer == "delta_net") {
      const DeltaRuleShape p = mixer == "delta_net"
                                   ? DeltaNetParams::From(layer.mixer.params).Shape()
                                   : GatedDeltaNetParams::From(layer.mixer.params).Shape();
      const int64_t c = p.ConvChannels();
      const int64_t hv = p.v_heads, vd = p.ValueDim();
      // a (decay), b (β) and g (gate) beside q | k | v where the layer has them.
      const int64_t extra = (p.decay ? hv : 0) + (p.beta ? hv : 0) + (p.gate ? vd : 0);
      const int64_t in = c + extra;
      const int64_t past = static_cast<int64_t>(p.conv_size) - 1;
      a.Gemm("gdn_in", in, d);
      // Reads q | k | v (fp32), reads the K−1 past rows and rewrites them shifted, writes the
      // convolved q | k | v (fp32).
      a.Add(mixer + " conv", short_conv_kernels,
            {.state = 2 * st * past * c * kF32, .activations = 2 * b * c * kF32},
            b * 2 * static_cast<int64_t>(p.conv_size) * c);
      // The floor reads and writes S once (the decode kernel reads it twice, the second pass from
      // whatever of it L1 kept); reads q, k, v and a, b, g where the layer has them (fp32),
      // writes o in the weights' type. Per S entry and token: the decay, (decayed S)ᵀk, the
      // update and Sᵀq (7 FLOPs; the CUDA prefill runs this recurrence token by token).
      a.Add(mixer + pass, kernels("DecodeGatedDeltaRuleKernel", "PrefillGatedDeltaRuleKernel"),
            {.state = 2 * st * p.HistoryOffset() * kF32,
             .activations = b * (c + extra) * kF32 + b * vd * w},
            b * 7 * p.HistoryOffset());
      a.Gemm("o", d, vd);
    } else if (mixer == "gated_linear_attention" || mixer == "retention") {
      const GatedLinearAttentionShape p =
          mixer == "retention" ? RetentionParams::From(layer.mixer.params).Shape()
                               : GatedLinearAttentionParams::From(layer.mixer.params).Shape();
      const bool low_rank = p.gate == GatedLinearAttentionShape::Gate::kLowRank;
      const int64_t qkv = 2 * p.KeyDim() + p.ValueDim();
      const int64_t rank = low_rank ? p.rank : 0;
      const int64_t in = qkv + rank + (p.output_gate ? p.ValueDim() : 0);
      a.Gemm("gla_in", in, d);
      if (p.short_conv) {
        const int64_t past = static_cast<int64_t>(p.conv_size) - 1;
        a.Add(mixer + " conv", short_conv_kernels,
              {.state = 2 * st * past * qkv * kF32, .activations = 2 * b * qkv * kF32},
              b * 2 * static_cast<int64_t>(p.conv_size) * qkv);
      }
      // Reads and writes S once; reads gk_proj.1's weight and bias (fp32, once a step or pass:
      // every row's blocks share them) with the low-rank gate, the projections' row (fp32),
      // writes o in the weights' type. Per S entry and token: the gate, k·v, the sum and o's
      // product and sum (5 FLOPs; the rotation's turn 3 more); per key channel the gate's
      // low-rank dot product.
      const int64_t per_entry = p.rotary ? 8 : 5;
      a.Add(mixer + pass,
            kernels("DecodeGatedLinearAttentionKernel", "PrefillGatedLinearAttentionKernel"),
            {.weights = low_rank ? a.weight_reads() * (p.KeyDim() * rank + p.KeyDim()) * kF32 : 0,
             .state = 2 * st * p.HistoryOffset() * kF32,
             .activations = b * in * kF32 + b * p.ValueDim() * w},
            b * (per_entry * p.HistoryOffset() + 2 * p.KeyDim() * rank));
      a.Gemm("o", d, p.ValueDim());
    } else if (mixer == "mamba2") {
      const Mamba2Params p = Mamba2Params::From(layer.mixer.params);
      const int64_t c = p.ConvChannels();
      const int64_t di = p.InnerDim();
      const int64_t past = static_cast<int64_t>(p.conv_size) - 1;
      a.Gemm("mamba_in", p.InColumns(), d);
      a.Add(mixer + " conv", short_conv_kernels,
            {.state = 2 * st * past * c * kF32, .activations = 2 * b * c * kF32},
            b * 2 * static_cast<int64_t>(p.conv_size) * c);
      // Reads and writes S once; reads x | B | C and dt (fp32), writes y (fp32). Per S entry and
      // token the decay, B·v, the sum and y's product and sum (5 FLOPs); per channel dt·x and the
      // D skip.
      a.Add(mixer + " scan", kernels("DecodeMamba2Kernel", "PrefillMamba2Kernel"),
            {.state = 2 * st * p.HistoryOffset() * kF32,
             .activations = b * (c + p.n_heads) * kF32 + b * di * kF32},
            b * (5 * p.HistoryOffset() + 3 * di));
      // Reads y and z (fp32), writes the normed rows in the weights' type.
      a.Add(mixer + " norm", "Mamba2NormKernel", {.activations = 2 * b * di * kF32 + b * di * w},
            b * 6 * di);
      a.Gemm("o", d, di);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": layers[", l, "].mixer.kind \"", mixer, "\" is unknown"));
    }
    const std::string& mlp = layer.mlp.kind;
    const bool last = l + 1 == layers.size();
    if (mlp == "none") {  // no MLP: the mixer's add goes into the next norm (post-norm: norm1)
      a.Norm(!pre ? layer.norm.kind : last ? config.FinalNorm().kind : layers[l + 1].norm.kind, d);
      continue;
    }
    a.Norm(layer.norm.kind, d);
    if (mlp == "ffn") {
      const int64_t ff = FfnParams::From(layer.mlp.params).d_ff;
      if (a.Fuses(d)) {
        a.Gemm("fc1", ff, d, ff, w);
      } else {
        a.Gemm("fc1", ff, d);
        a.Add("bias + activation", "BiasActivationKernel",
              {.activations = b * ff * kF32 + b * ff * w}, 0);
      }
      a.Gemm("fc2", d, ff);
    } else if (mlp == "gated_mlp") {
      const int64_t ff = GatedMlpParams::From(layer.mlp.params).d_ff;
      if (a.Fuses(d)) {
        a.Gemm("fc1", 2 * ff, d, ff, w);
      } else {
        a.Gemm("fc1", 2 * ff, d);
        a.Add("bias + gate", "BiasGateKernel", {.activations = b * 2 * ff * kF32 + b * ff * w}, 0);
      }
      a.Gemm("fc2", d, ff);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": layers[", l, "].mlp.kind \"", mlp, "\" is unknown"));
    }
    const std::string& next_norm = !pre   ? layer.norm.kind
                                   : last ? config.FinalNorm().kind
                                          : layers[l + 1].norm.kind;
    a.Norm(next_norm, d);
  }
  // Decode: every row's logits, then their picks; prefill: the last token's logits.
  const int64_t heads = step.prefill ? 1 : b;
  a.Add("lm head", "",
        {.weights = vocab * d * w, .activations = heads * d * w, .logits = heads * vocab * kF32},
        2 * heads * vocab * d);
  if (!step.prefill) {
    a.Add("sample", "ArgmaxKernel|SampleKernel|CountTokensKernel", {.logits = b * vocab * kF32}, 0);
  }
  return a.Take();
}

}  // namespace

absl::StatusOr<std::vector<KernelCost>> DecodeKernelAccount(const ModelConfig& config,
                                                            int64_t batch,
                                                            int64_t weight_element_bytes) {
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeKernelAccount: batch ", batch, " < 1"));
  }
  return Build(config, Step{.rows = batch}, weight_element_bytes, "DecodeKernelAccount");
}

absl::StatusOr<std::vector<KernelCost>> PrefillKernelAccount(const ModelConfig& config,
                                                             int64_t tokens, int64_t pass_rows,
                                                             int64_t chunk,
                                                             int64_t weight_element_bytes) {
  if (tokens < 1 || pass_rows < 1 || chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat("PrefillKernelAccount: tokens ", tokens,
                                                   ", pass_rows ", pass_rows, " and chunk ", chunk,
                                                   " must be >= 1"));
  }
  return Build(config,
               Step{.rows = tokens,
                    .prefill = true,
                    .passes = (tokens + pass_rows - 1) / pass_rows,
                    .chunk = chunk},
               weight_element_bytes, "PrefillKernelAccount");
}

KernelCost AccountTotal(const std::vector<KernelCost>& account) {
  KernelCost total;
  total.name = "total";
  for (const KernelCost& c : account) {
    total.launches += c.launches;
    total.bytes.weights += c.bytes.weights;
    total.bytes.state += c.bytes.state;
    total.bytes.activations += c.bytes.activations;
    total.bytes.logits += c.bytes.logits;
    total.flops += c.flops;
  }
  return total;
}

}  // namespace linserve
