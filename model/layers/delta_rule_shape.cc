#include "model/layers/delta_rule_shape.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace linserve {

std::vector<TensorDecl> DeltaRuleTensors(const DeltaRuleShape& p, int64_t d) {
  const int64_t kd = p.KeyDim();
  const int64_t vd = p.ValueDim();
  const int64_t hv = p.v_heads;
  std::vector<TensorDecl> t = {
      {"attn.q_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.k_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.v_proj.weight", {vd, d}, /*projection=*/true},
  };
  if (p.decay) t.push_back({"attn.a_proj.weight", {hv, d}, /*projection=*/true});
  if (p.beta) t.push_back({"attn.b_proj.weight", {hv, d}, /*projection=*/true});
  if (p.gate) t.push_back({"attn.g_proj.weight", {vd, d}, /*projection=*/true});
  if (p.decay) {
    t.push_back({"attn.A_log", {hv}});
    t.push_back({"attn.dt_bias", {hv}});
  }
  const std::pair<const char*, int64_t> convs[] = {{"q", kd}, {"k", kd}, {"v", vd}};
  for (const auto& [conv, channels] : convs) {
    t.push_back({absl::StrCat("attn.", conv, "_conv1d.weight"), {channels, p.conv_size}});
    if (p.conv_bias) t.push_back({absl::StrCat("attn.", conv, "_conv1d.bias"), {channels}});
  }
  t.push_back({"attn.o_norm.weight", {int64_t{p.v_dim}}});
  t.push_back({"attn.o_proj.weight", {d, vd}, /*projection=*/true});
  return t;
}

std::string LocateDeltaRuleState(const DeltaRuleShape& p, int64_t index) {
  if (index < p.HistoryOffset()) {
    const int64_t per_head = int64_t{p.k_dim} * p.v_dim;
    const int64_t in_head = index % per_head;
    return absl::StrCat("value head ", index / per_head, ", S[", in_head / p.v_dim, "][",
                        in_head % p.v_dim, "]");
  }
  const int64_t in_history = index - p.HistoryOffset();
  const int64_t row = in_history / p.ConvChannels();
  int64_t channel = in_history % p.ConvChannels();
  const char* which = "q";
  if (channel >= 2 * p.KeyDim()) {
    which = "v";
    channel -= 2 * p.KeyDim();
  } else if (channel >= p.KeyDim()) {
    which = "k";
    channel -= p.KeyDim();
  }
  return absl::StrCat(which, " of token t-", p.conv_size - 2 - row, " (history row ", row,
                      "), channel ", channel);
}

}  // namespace linserve
