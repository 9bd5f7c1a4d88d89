// --state_precision (model/backend/state_precision.h): parsing, the CPU backend's refusal of a
// bf16 state, which models the CUDA backend accepts it for (checked without a device), and the
// slot count a bf16 state gives in the same budget. The bf16 state itself: tests/gpu.
#include "model/backend/state_precision.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/slot_pool.h"
#include "model/layers/linear_attention.h"
#include "model/layers/sliding_window_attention.h"
#include "model/model.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

TEST(StatePrecisionTest, ParsesEveryNameAndRefusesOthersNamingThem) {
  for (StatePrecision p : {StatePrecision::kFp32, StatePrecision::kBf16}) {
    absl::StatusOr<StatePrecision> parsed = ParseStatePrecision(StatePrecisionName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(BackendOptions{}.state_precision, StatePrecision::kFp32);
  EXPECT_EQ(StateElementBytes(StatePrecision::kFp32), 4);
  EXPECT_EQ(StateElementBytes(StatePrecision::kBf16), 2);
  for (const char* bad : {"fp16", "", "BF16", "auto", "int8"}) {
    absl::StatusOr<StatePrecision> parsed = ParseStatePrecision(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr(std::string("state_precision \"") + bad +
                          "\" is not one of fp32, bf16"));
  }
}

TEST(StatePrecisionTest, TheCpuBackendRefusesABf16StateNamingTheFlag) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  BackendOptions options;
  options.max_slots = 2;
  EXPECT_TRUE(CreateCpuBackend(model, options).ok());
  options.state_precision = StatePrecision::kBf16;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("state_precision bf16: the CPU backend stores the state in fp32 only; "
                        "bf16 is for --device=cuda"));
}

TEST(StatePrecisionTest, CudaTakesBf16OnlyWhenEveryMixerAllowsIt) {
  EXPECT_TRUE(CheckCudaStatePrecision(StatePrecision::kFp32, TinyBasedConfig()).ok());
  EXPECT_TRUE(CheckCudaStatePrecision(StatePrecision::kBf16, TinyConfig()).ok());
  // TinyBasedConfig has sliding-window layers (a ring's counters): refused, naming the first.
  const ModelConfig based_config = TinyBasedConfig();
  size_t first = 0;
  while (based_config.layers[first].mixer.kind != SlidingWindowAttentionKind().name) ++first;
  const absl::Status based = CheckCudaStatePrecision(StatePrecision::kBf16, based_config);
  EXPECT_EQ(based.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(based.message()),
              HasSubstr("state_precision bf16: layer " + std::to_string(first) + "'s mixer is " +
                        based_config.layers[first].mixer.kind));
  EXPECT_THAT(std::string(based.message()), HasSubstr("(use --state_precision=fp32)"));
  // Its Taylor and short_conv layers alone are accepted.
  ModelConfig rest = based_config;
  std::erase_if(rest.layers, [](const LayerSpec& layer) {
    return layer.mixer.kind == SlidingWindowAttentionKind().name;
  });
  ASSERT_FALSE(rest.layers.empty());
  EXPECT_TRUE(CheckCudaStatePrecision(StatePrecision::kBf16, rest).ok());
}

TEST(StatePrecisionTest, ABf16StateFitsTwiceTheSlotsInTheSameBudget) {
  const ModelConfig config = TinyConfig();
  BackendOptions options;
  options.max_slots = 1000;
  options.state_memory_budget_bytes = config.StateFloatsPerSlot() * 4 * 3 + 5;
  const BackendLimits limits{.max_prefill_chunk_size = 64, .max_batch_size = 256};
  EXPECT_EQ(*SlotCapacity(config, options, limits), 3);
  options.state_precision = StatePrecision::kBf16;
  EXPECT_EQ(*SlotCapacity(config, options, limits), 6);
}

}  // namespace
}  // namespace linserve
