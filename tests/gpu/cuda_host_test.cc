// The host-side parts of the CUDA code, which run (and must pass) on machines without a GPU:
// error conversion, the MT19937-64 shared with the device sampler, option checks and the
// "no device" path of CreateCudaBackend.
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/mt19937_64.h"
#include "model/backend/cuda/cuda_backend.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Status FailingAllocation() {
  LINSERVE_CUDA_RETURN_IF_ERROR(cudaErrorMemoryAllocation);
  return absl::OkStatus();
}

absl::Status FailingCublasCall() {
  LINSERVE_CUBLAS_RETURN_IF_ERROR(CUBLAS_STATUS_NOT_SUPPORTED);
  return absl::OkStatus();
}

TEST(CudaStatusTest, CudaErrorsMapToCodesAndNameTheCall) {
  const absl::Status oom = FailingAllocation();
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(oom.message(), AllOf(HasSubstr("cudaErrorMemoryAllocation failed"),
                                   HasSubstr("cudaErrorMemoryAllocation"),
                                   HasSubstr("tests/gpu/cuda_host_test.cc:")));

  EXPECT_EQ(
      cuda::CudaErrorToStatus(cudaErrorInvalidValue, "cudaMemcpy(a, b, n, k)", "f.cc", 1).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::CudaErrorToStatus(cudaErrorNoDevice, "x", "f.cc", 1).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(cuda::CudaErrorToStatus(cudaErrorInsufficientDriver, "x", "f.cc", 1).code(),
            absl::StatusCode::kUnavailable);
  const absl::Status launch =
      cuda::CudaErrorToStatus(cudaErrorLaunchFailure, "launch of K", "/src/kernels/cuda/k.cu", 42);
  EXPECT_EQ(launch.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(launch.message(),
              AllOf(HasSubstr("launch of K failed"), HasSubstr("kernels/cuda/k.cu:42")));
  EXPECT_TRUE(cuda::CudaErrorToStatus(cudaSuccess, "x", "f.cc", 1).ok());
}

TEST(CudaStatusTest, CublasErrorsMapToCodesAndNameTheCall) {
  const absl::Status status = FailingCublasCall();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("CUBLAS_STATUS_NOT_SUPPORTED"));
  EXPECT_EQ(cuda::CublasErrorToStatus(CUBLAS_STATUS_ALLOC_FAILED, "c", "f.cc", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cuda::CublasErrorToStatus(CUBLAS_STATUS_INVALID_VALUE, "c", "f.cc", 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::CublasErrorToStatus(CUBLAS_STATUS_EXECUTION_FAILED, "c", "f.cc", 1).code(),
            absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, FormatBytes) {
  EXPECT_EQ(cuda::FormatBytes(512), "512 B");
  EXPECT_EQ(cuda::FormatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(cuda::FormatBytes(int64_t{5} << 29), "2.50 GiB");
}

// The device sampler draws from this generator; std::mt19937_64 is what the host Sampler uses.
TEST(Mt19937Test, MatchesStdMt19937_64) {
  for (uint64_t seed :
       {uint64_t{0}, uint64_t{1}, uint64_t{5489}, uint64_t{0xDEADBEEFCAFEull}, ~uint64_t{0}}) {
    std::mt19937_64 expected(seed);
    cuda::Mt19937_64 actual;
    actual.Seed(seed);
    for (int i = 0; i < 2000; ++i) {
      ASSERT_EQ(actual.Next(), expected()) << "seed " << seed << " draw " << i;
    }
  }
}

TEST(CreateCudaBackendTest, OptionsOutOfRangeAreRejectedByNameBeforeTouchingTheDevice) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  auto expect_invalid = [&](const BackendOptions& options, const std::string& field,
                            const std::string& limit) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, options);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), AllOf(HasSubstr(field), HasSubstr(limit)));
  };
  BackendOptions options;
  options.prefill_chunk_size = 129;
  expect_invalid(options, "prefill_chunk_size", "128");
  options = BackendOptions();
  options.max_batch_size = 0;
  expect_invalid(options, "max_batch_size", "32768");
  options = BackendOptions();
  options.max_slots = 0;
  expect_invalid(options, "max_slots", "1048576");
  options = BackendOptions();
  options.state_memory_budget_bytes = 100;
  expect_invalid(options, "state_memory_budget_bytes", "below one slot");
}

// Without a device the backend says so (UNAVAILABLE, with the runtime's reason); with one it is
// created. Either way this runs on every machine of the CUDA build.
TEST(CreateCudaBackendTest, NoDeviceIsUnavailableElseCreated) {
  const Model model = MakeRandomModel(TinyConfig(), 1);
  std::string reason;
  const bool present = gpu_test::CudaDevicePresent(&reason);
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CreateCudaBackend(model, BackendOptions());
  if (present) {
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->device(), DeviceKind::kCuda);
  } else {
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(b.status().message(), HasSubstr("no CUDA device"));
  }
}

TEST(CreateCudaBackendTest, DeviceOrdinalOutOfRange) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const Model model = MakeRandomModel(TinyConfig(), 1);
  CudaBackendOptions cuda_options;
  cuda_options.device = 1000;
  absl::StatusOr<std::unique_ptr<CudaBackend>> b =
      CreateCudaBackend(model, BackendOptions(), cuda_options);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("CudaBackendOptions.device = 1000"));
}

}  // namespace
}  // namespace linserve
