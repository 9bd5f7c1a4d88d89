// linserve-bench-model: writes a random model directory of a given shape (byte tokenizer, the
// ids past 259 standing for nothing), for the server overhead benchmark when the bundled model
// is not used. The defaults are the bundled model's shape (vocabulary 2048, d_model 256, 6
// layers, 4 heads, d_ff 1024, no position embedding), so the work per token is the same.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "model/format/config.h"
#include "tests/testing/random_model.h"

ABSL_FLAG(std::string, out, "", "Model directory to write (created if needed). Required.");
ABSL_FLAG(int32_t, vocab_size, 2048, "Vocabulary size, >= 260 (256 bytes and 4 specials).");
ABSL_FLAG(int32_t, d_model, 256, "Model width; a multiple of --n_heads.");
ABSL_FLAG(int32_t, n_layers, 6, "Layers.");
ABSL_FLAG(int32_t, n_heads, 4, "Attention heads.");
ABSL_FLAG(int32_t, d_ff, 1024, "Feed-forward width.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random weights.");

namespace linserve {
namespace {

absl::Status Run() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out: required");
  ModelConfig config = TinyConfig();
  config.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.n_layers = absl::GetFlag(FLAGS_n_layers);
  config.n_heads = absl::GetFlag(FLAGS_n_heads);
  config.d_ff = absl::GetFlag(FLAGS_d_ff);
  config.position = PositionEmbedding::kNone;
  if (config.n_heads <= 0 || config.d_model % config.n_heads != 0) {
    return absl::InvalidArgumentError("--d_model must be a positive multiple of --n_heads");
  }
  config.head_dim = config.d_model / config.n_heads;
  config.feature_dim = config.head_dim;
  // Round-trips through the parser so that every range check applies.
  absl::StatusOr<ModelConfig> checked = ParseModelConfig(ModelConfigToJson(config), "flags");
  if (!checked.ok()) return checked.status();
  return WriteModelDirectory(out, *checked, MakeRandomWeights(*checked, absl::GetFlag(FLAGS_seed)));
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes a random model directory for benchmarks.");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = linserve::Run(); !s.ok()) {
    std::fprintf(stderr, "linserve-bench-model: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
