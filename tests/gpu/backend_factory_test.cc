// CreateBackend / --device: built in both configurations (with and without the CUDA backend)
// and on machines with and without a GPU; every combination has one right answer.
#include "model/backend/backend_factory.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

TEST(BackendFactoryTest, ParsesDeviceNames) {
  EXPECT_EQ(*ParseDeviceSelection("auto"), DeviceSelection::kAuto);
  EXPECT_EQ(*ParseDeviceSelection("cpu"), DeviceSelection::kCpu);
  EXPECT_EQ(*ParseDeviceSelection("cuda"), DeviceSelection::kCuda);
  for (DeviceSelection s :
       {DeviceSelection::kAuto, DeviceSelection::kCpu, DeviceSelection::kCuda}) {
    EXPECT_EQ(*ParseDeviceSelection(ToString(s)), s);
  }
  const absl::StatusOr<DeviceSelection> bad = ParseDeviceSelection("gpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"gpu\" is not one of auto, cpu, cuda"));
}

TEST(BackendFactoryTest, CpuIsAlwaysTheCpuBackend) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  absl::StatusOr<std::unique_ptr<Backend>> b =
      CreateBackend(model, BackendOptions(), DeviceSelection::kCpu);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device(), DeviceKind::kCpu);
}

// cuda either works, or says why (not built / no device); auto follows it. The same for the
// single-block model and for a Based model (every layer kind has a CUDA component).
TEST(BackendFactoryTest, AutoFollowsWhetherCudaIsUsable) {
  for (const ModelConfig& config : {TinyConfig(), TinyBasedConfig()}) {
    SCOPED_TRACE(ModelConfigToJson(config));
    const Model model = MakeRandomModel(config, 1);
    absl::StatusOr<std::unique_ptr<Backend>> cuda =
        CreateBackend(model, BackendOptions(), DeviceSelection::kCuda);
    absl::StatusOr<std::unique_ptr<Backend>> automatic =
        CreateBackend(model, BackendOptions(), DeviceSelection::kAuto);
    ASSERT_TRUE(automatic.ok()) << automatic.status();
    if (cuda.ok()) {
      EXPECT_TRUE(CudaBackendBuilt());
      EXPECT_EQ((*cuda)->device(), DeviceKind::kCuda);
      EXPECT_EQ((*automatic)->device(), DeviceKind::kCuda);
    } else if (!CudaBackendBuilt()) {
      EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnimplemented);
      EXPECT_THAT(cuda.status().message(), HasSubstr("no CUDA backend"));
      EXPECT_EQ((*automatic)->device(), DeviceKind::kCpu);
    } else {
      EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable) << cuda.status();
      EXPECT_THAT(cuda.status().message(), HasSubstr("no CUDA device"));
      EXPECT_EQ((*automatic)->device(), DeviceKind::kCpu);
    }
  }
}

// Option errors come from the chosen backend, naming the field.
TEST(BackendFactoryTest, OptionErrorsNameTheField) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  BackendOptions options;
  options.max_batch_size = 0;
  for (DeviceSelection s : {DeviceSelection::kCpu, DeviceSelection::kAuto}) {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(model, options, s);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("max_batch_size"));
  }
}

}  // namespace
}  // namespace linserve
