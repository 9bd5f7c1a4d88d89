// The CPU backend against the PyTorch reference's golden data (reference/make_golden.py,
// ctest fixture `golden`): for every case, prefill's every-position logits and step-by-step
// Decode's logits, plus the final state, within relative error 1e-4, where the relative error
// of a case is max|cpp − ref| / max|ref| over the whole tensor.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "model/format/safetensors.h"
#include "nlohmann/json.hpp"

namespace linserve {
namespace {

constexpr double kTolerance = 1e-4;
const std::string kGoldenDir = std::string(LINSERVE_BINARY_DIR) + "/golden";

double RelativeError(absl::Span<const float> got, absl::Span<const float> ref) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[i])));
  }
  return diff / scale;
}

struct GoldenCase {
  std::string name;
  int chunk_size = 0;
};

std::vector<GoldenCase> LoadCases() {
  std::ifstream in(kGoldenDir + "/cases.json");
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  std::vector<GoldenCase> cases;
  for (const auto& c : j.at("cases")) {
    cases.push_back({c.at("name").get<std::string>(), c.at("chunk_size").get<int>()});
  }
  return cases;
}

struct Expected {
  std::vector<TokenId> tokens;
  std::vector<float> logits_parallel, logits_recurrent, final_state;
  int64_t final_position = 0;
};

Expected LoadExpected(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  Expected e;
  if (!f.ok()) return e;
  const std::vector<int64_t> tokens = *(*f)->ReadInt64("tokens");
  e.tokens.assign(tokens.begin(), tokens.end());
  e.logits_parallel = *(*f)->ReadFloat32("logits_parallel");
  e.logits_recurrent = *(*f)->ReadFloat32("logits_recurrent");
  e.final_state = *(*f)->ReadFloat32("final_state");
  e.final_position = (*(*f)->ReadInt64("final_position"))[0];
  return e;
}

TEST(GoldenTest, CpuBackendMatchesTheReferenceOnEveryCase) {
  const std::vector<GoldenCase> cases = LoadCases();
  ASSERT_GE(cases.size(), 12u) << "no golden data in " << kGoldenDir
                               << " (ctest runs the golden_data fixture first)";
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = kGoldenDir + "/" + c.name;
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    const Expected e = LoadExpected(dir + "/expected.safetensors");
    const int64_t vocab = (*model)->config.vocab_size;
    const int64_t t = static_cast<int64_t>(e.tokens.size());
    ASSERT_GE(t, 64);
    ASSERT_EQ(static_cast<int64_t>(e.logits_parallel.size()), t * vocab);
    ASSERT_EQ(static_cast<int64_t>(e.final_state.size()), (*model)->config.StateFloatsPerSlot());

    BackendOptions options;
    options.prefill_chunk_size = c.chunk_size;
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(**model, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    Backend& b = **backend;

    // Prefill, every position's logits.
    const SlotId p = *b.AllocateSlot();
    std::vector<float> logits(static_cast<size_t>(t * vocab));
    ASSERT_TRUE(b.Prefill(p, e.tokens, absl::MakeSpan(logits)).ok());
    StateBlob state;
    ASSERT_TRUE(b.ReadSlot(p, state).ok());
    const double prefill_error = RelativeError(logits, e.logits_parallel);
    const double prefill_state_error = RelativeError(state.state, e.final_state);
    EXPECT_LE(prefill_error, kTolerance);
    EXPECT_LE(prefill_state_error, kTolerance);
    EXPECT_EQ(state.position, e.final_position);

    // Decode, one token per step.
    const SlotId d = *b.AllocateSlot();
    for (int64_t i = 0; i < t; ++i) {
      const DecodeItem item{d, e.tokens[i]};
      ASSERT_TRUE(b.Decode({&item, 1}, absl::MakeSpan(logits).subspan(i * vocab, vocab)).ok());
    }
    ASSERT_TRUE(b.ReadSlot(d, state).ok());
    const double decode_error = RelativeError(logits, e.logits_recurrent);
    const double decode_state_error = RelativeError(state.state, e.final_state);
    EXPECT_LE(decode_error, kTolerance);
    EXPECT_LE(decode_state_error, kTolerance);
    EXPECT_EQ(state.position, e.final_position);
    std::printf("%s: chunk %2d  prefill logits %.1e state %.1e | decode logits %.1e state %.1e\n",
                c.name.c_str(), c.chunk_size, prefill_error, prefill_state_error, decode_error,
                decode_state_error);
  }
}

}  // namespace
}  // namespace linserve
