// Every kernel of kernels/cuda against its CPU counterpart in kernels/cpu (the source of truth)
// or, for the sampler, against the host Sampler, on random inputs. Tolerances are relative to
// the reference's largest magnitude (RelativeError) and say why they are what they are.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/casts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear_attention.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/logprobs.h"
#include "kernels/cuda/prefill_pieces.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/short_conv.h"
#include "kernels/cuda/sliding_window_attention.h"
#include "model/backend/sampler.h"
#include "tests/gpu/gpu_test_util.h"
#ifdef LINSERVE_CUDA_EMULATION
#include "tests/gpu/emulation/launch_log.h"

namespace emu {  // cuda_emulation.h's, which only the kernels' sources include
void Launch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            std::function<void()> body, bool dependent);
void WaitForPriorKernel();
void LetNextKernelStart();
extern dim3 g_thread_idx;
}  // namespace emu
#endif

namespace linserve {
namespace {

using cuda::DType;
using gpu_test::DeviceArray;
using gpu_test::RandomFloats;
using gpu_test::RelativeError;

// fp32 kernels differ from the CPU's only in summation order, FMA contraction and the last ulp
// of exp/erf/tanh: errors stay within a few fp32 ulps of the largest value.
constexpr double kFp32Tolerance = 1e-5;

float Round(DType dtype, float x) {
  switch (dtype) {
    case DType::kBf16:
      return gpu_test::RoundBf16(x);
    case DType::kF16:
      return gpu_test::RoundFp16(x);
    case DType::kF32:
      return x;
  }
  return x;
}

// Uploads fp32 values and converts them to `dtype` on the device; also returns the host copy
// rounded the same way.
struct TypedArray {
  DeviceArray<uint8_t> bytes;
  std::vector<float> rounded;
};
TypedArray Upload(const std::vector<float>& host, DType dtype) {
  DeviceArray<float> staging(host);
  TypedArray out{DeviceArray<uint8_t>(host.size() * cuda::DTypeSize(dtype)), {}};
  EXPECT_TRUE(cuda::LaunchConvert(nullptr, staging.get(), static_cast<int64_t>(host.size()), dtype,
                                  out.bytes.get())
                  .ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.rounded.resize(host.size());
  for (size_t i = 0; i < host.size(); ++i) out.rounded[i] = Round(dtype, host[i]);
  return out;
}

// Reads back a T buffer as floats.
std::vector<float> ToFloats(const DeviceArray<uint8_t>& bytes, DType dtype, size_t n) {
  const std::vector<uint8_t> raw = bytes.Download();
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else if (dtype == DType::kBf16) {
      uint32_t bits =
          static_cast<uint32_t>(raw[2 * i]) | (static_cast<uint32_t>(raw[2 * i + 1]) << 8);
      bits <<= 16;
      std::memcpy(&out[i], &bits, 4);
    } else {
      _Float16 h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = static_cast<float>(h);
    }
  }
  return out;
}

constexpr DType kTypes[] = {DType::kF32, DType::kBf16, DType::kF16};

TEST(CudaKernelsTest, ConvertRoundsToNearestEvenLikeTheHost) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> values = RandomFloats(4096, 1, 3.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f / 3.0f,
                            65504.0f,
                            65520.0f,
                            1e-7f,
                            -6e-8f,
                            1e-40f,
                            3.0e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            1.00390625f,
                            1.01171875f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  for (DType dtype : {DType::kBf16, DType::kF16}) {
    SCOPED_TRACE(cuda::DTypeName(dtype));
    TypedArray typed = Upload(values, dtype);
    const std::vector<float> back = ToFloats(typed.bytes, dtype, values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(std::memcmp(&back[i], &typed.rounded[i], 4), 0)
          << values[i] << " -> " << back[i] << ", host " << typed.rounded[i];
    }
  }
}

#ifdef LINSERVE_CUDA_EMULATION
// Every kernel launches as a programmatic dependent of the kernel before it while
// cuda::DependentLaunchEnabled() (kernels/cuda/dependent_launch.cuh), and not when it is off; the
// emulation checks the rule of every such launch that any test runs — each thread waits for the
// kernel before it before it lets the next start and before it ends — and aborts otherwise.
TEST(CudaKernelsTest, KernelsLaunchAsDependentsAndTheEmulationChecksTheirWait) {
  DeviceArray<float> staging(std::vector<float>(300, 1.5f));
  DeviceArray<uint8_t> out(300 * 2);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto dependent_runs_of_a_launch_on = [&](cudaStream_t s) {
    const int64_t before = emu::DependentKernelRuns();
    EXPECT_TRUE(cuda::LaunchConvert(s, staging.get(), 300, DType::kBf16, out.get()).ok());
    return emu::DependentKernelRuns() - before;
  };
  EXPECT_TRUE(cuda::DependentLaunchEnabled());  // the default
  EXPECT_EQ(dependent_runs_of_a_launch_on(stream), 1);
  EXPECT_EQ(dependent_runs_of_a_launch_on(nullptr), 0);  // the legacy default stream
  cuda::SetDependentLaunch(false);
  EXPECT_EQ(dependent_runs_of_a_launch_on(stream), 0);
  cuda::SetDependentLaunch(true);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  auto waits_then_lets_go = [] {
    emu::WaitForPriorKernel();
    emu::LetNextKernelStart();
  };
  emu::Launch("Waits", dim3(2), dim3(64), 0, nullptr, waits_then_lets_go, true);
  EXPECT_DEATH(emu::Launch(
                   "NeverWaits", dim3(1), dim3(32), 0, nullptr, [] {}, true),
               "NeverWaits, launched as a programmatic dependent, ended without waiting");
  EXPECT_DEATH(
      emu::Launch(
          "LetsGoFirst", dim3(1), dim3(32), 0, nullptr, [] { emu::LetNextKernelStart(); }, false),
      "LetsGoFirst lets the next kernel start before it has waited");
  // One thread that skips the wait is enough.
  EXPECT_DEATH(emu::Launch(
                   "OneSkips", dim3(1), dim3(64), 0, nullptr,
                   [] {
                     if (emu::g_thread_idx.x != 63) emu::WaitForPriorKernel();
                   },
                   true),
               "OneSkips");
}
#endif

// y = x · wᵀ with fp32 accumulation: against OpenBLAS on the same (rounded) inputs.
TEST(CudaKernelsTest, LinearMatchesCpuGemm) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(size_t{32} << 20);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  struct Shape {
    int m, n, k;
  };
  for (const Shape s :
       {Shape{1, 2304, 768}, Shape{7, 33, 19}, Shape{256, 64, 128}, Shape{3, 50257, 64},
        // 16-bit types take small_batch_linear.cu's kernel up to 4 rows (k a multiple of 8),
        // cuBLASLt from 5.
        Shape{4, 768, 3072}, Shape{2, 77, 64}, Shape{5, 96, 64}}) {
    for (DType dtype : kTypes) {
      SCOPED_TRACE(testing::Message()
                   << s.m << "x" << s.n << "x" << s.k << " " << cuda::DTypeName(dtype));
      TypedArray x = Upload(RandomFloats(static_cast<size_t>(s.m) * s.k, 2), dtype);
      TypedArray w = Upload(RandomFloats(static_cast<size_t>(s.n) * s.k, 3, 0.1f), dtype);
      const std::vector<float> y0 = RandomFloats(static_cast<size_t>(s.m) * s.n, 4);
      DeviceArray<float> y(y0);
      std::vector<float> expect(y0.size());
      cpu::Gemm(cpu::Transpose::kNo, cpu::Transpose::kYes, s.m, s.n, s.k, 1.0f, x.rounded.data(),
                s.k, w.rounded.data(), s.k, 0.0f, expect.data(), s.n);
      ASSERT_TRUE((*gemm)
                      ->Linear(nullptr, dtype, x.bytes.get(), w.bytes.get(), y.get(), s.m, s.n, s.k)
                      .ok());
      EXPECT_LE(RelativeError(y.Download(), expect), kFp32Tolerance);

      // Accumulating form: y += x · wᵀ.
      y.Upload(y0);
      for (size_t i = 0; i < expect.size(); ++i) expect[i] += y0[i];
      ASSERT_TRUE((*gemm)
                      ->Linear(nullptr, dtype, x.bytes.get(), w.bytes.get(), y.get(), s.m, s.n, s.k,
                               /*accumulate=*/true)
                      .ok());
      EXPECT_LE(RelativeError(y.Download(), expect), kFp32Tolerance);
    }
  }
}

// Rows that start at an odd element offset (the prefill LM head reads one row of a matrix).
TEST(CudaKernelsTest, LinearOnUnalignedRows) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(size_t{4} << 20);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int m = 5, n = 77, k = 33;
  for (DType dtype : kTypes) {
    SCOPED_TRACE(cuda::DTypeName(dtype));
    TypedArray x = Upload(RandomFloats(static_cast<size_t>(m) * k, 5), dtype);
    TypedArray w = Upload(RandomFloats(static_cast<size_t>(n) * k, 6), dtype);
    DeviceArray<float> y(static_cast<size_t>(n) + 1);
    const int row = 3;
    const void* x_row = static_cast<const char*>(static_cast<const void*>(x.bytes.get())) +
                        static_cast<size_t>(row) * k * cuda::DTypeSize(dtype);
    ASSERT_TRUE((*gemm)->Linear(nullptr, dtype, x_row, w.bytes.get(), y.get() + 1, 1, n, k).ok());
    std::vector<float> expect(n);
    cpu::Gemm(cpu::Transpose::kNo, cpu::Transpose::kYes, 1, n, k, 1.0f, x.rounded.data() + row * k,
              k, w.rounded.data(), k, 0.0f, expect.data(), n);
    std::vector<float> got = y.Download();
    got.erase(got.begin());
    EXPECT_LE(RelativeError(got, expect), kFp32Tolerance);
  }
}

TEST(CudaKernelsTest, EmbeddingGatherAndPositions) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const int vocab = 300, d = 96, rows = 9, max_position = 64;
  const std::vector<int32_t> tokens = gpu_test::RandomTokens(rows, vocab, 7);
  const std::vector<int64_t> positions = {0, 1, 2, 63, 17, 1000, 262143, 999999, 5000000};
  const std::vector<int64_t> learned_positions = {0, 1, 2, 63, 17, 40, 41, 5, 6};
  DeviceArray<int32_t> tokens_dev(tokens);
  for (DType dtype : kTypes) {
    for (cuda::PositionKind kind : {cuda::PositionKind::kNone, cuda::PositionKind::kSinusoidal,
                                    cuda::PositionKind::kLearned}) {
      SCOPED_TRACE(testing::Message()
                   << cuda::DTypeName(dtype) << " kind " << static_cast<int>(kind));
      const std::vector<int64_t>& pos =
          kind == cuda::PositionKind::kLearned ? learned_positions : positions;
      DeviceArray<int64_t> positions_dev(pos);
      TypedArray table = Upload(RandomFloats(static_cast<size_t>(vocab) * d, 8), dtype);
      TypedArray position_table =
          Upload(RandomFloats(static_cast<size_t>(max_position) * d, 9), dtype);
      DeviceArray<float> x(static_cast<size_t>(rows) * d);
      DeviceArray<uint8_t> x_t(static_cast<size_t>(rows) * d * cuda::DTypeSize(dtype));
      cuda::EmbedArgs args;
      args.tokens = tokens_dev.get();
      args.positions = positions_dev.get();
      args.table = table.bytes.get();
      args.position = kind;
      args.position_table = position_table.bytes.get();
      args.rows = rows;
      args.d = d;
      args.dtype = dtype;
      args.x = x.get();
      args.x_t = x_t.get();
      ASSERT_TRUE(cuda::LaunchEmbed(nullptr, args).ok());

      const std::vector<double> denominators = cpu::SinusoidalDenominators(d);
      std::vector<float> expect(static_cast<size_t>(rows) * d);
      for (int r = 0; r < rows; ++r) {
        float* e = expect.data() + static_cast<size_t>(r) * d;
        std::copy_n(table.rounded.data() + static_cast<size_t>(tokens[r]) * d, d, e);
        if (kind == cuda::PositionKind::kLearned) {
          for (int c = 0; c < d; ++c) e[c] += position_table.rounded[pos[r] * d + c];
        } else if (kind == cuda::PositionKind::kSinusoidal) {
          cpu::AddSinusoidalPosition(pos[r], denominators, e);
        }
      }
      // Device sin/cos/pow are within 2 ulp of glibc's in double: identical after rounding to
      // fp32 but for rare last-bit cases.
      EXPECT_LE(RelativeError(x.Download(), expect), 1e-6);
      std::vector<float> expect_t(expect.size());
      for (size_t i = 0; i < expect.size(); ++i) expect_t[i] = Round(dtype, expect[i]);
      EXPECT_LE(RelativeError(ToFloats(x_t, dtype, expect.size()), expect_t),
                dtype == DType::kF32 ? 1e-6 : 1e-2);

      // A pre-norm model's first norm in the same kernel: bitwise the embedding, then
      // LaunchAddNorm over its rows (LayerNorm and RMSNorm).
      const std::vector<float> gamma = RandomFloats(d, 15), beta = RandomFloats(d, 16);
      DeviceArray<float> gamma_dev(gamma), beta_dev(beta);
      for (cuda::NormType norm : {cuda::NormType::kLayerNorm, cuda::NormType::kRmsNorm}) {
        auto run = [&](bool fused) {
          DeviceArray<float> rx(static_cast<size_t>(rows) * d);
          DeviceArray<uint8_t> ry(static_cast<size_t>(rows) * d * cuda::DTypeSize(dtype));
          cuda::EmbedArgs e = args;
          e.x = rx.get();
          e.x_t = nullptr;
          cuda::AddNormArgs n;
          n.x = rx.get();
          n.sum_out = rx.get();
          n.norm = norm;
          n.gamma = gamma_dev.get();
          n.beta = beta_dev.get();
          n.y_t = ry.get();
          n.rows = rows;
          n.d = d;
          n.dtype = dtype;
          if (fused) {
            e.normalize = true;
            e.norm = n;
            EXPECT_TRUE(cuda::LaunchEmbed(nullptr, e).ok());
          } else {
            EXPECT_TRUE(cuda::LaunchEmbed(nullptr, e).ok());
            EXPECT_TRUE(cuda::LaunchAddNorm(nullptr, n).ok());
          }
          return std::pair{rx.Download(), ry.Download()};
        };
        EXPECT_EQ(run(true), run(false));
      }
      cuda::EmbedArgs bad = args;
      bad.normalize = true;  // a norm over no rows
      EXPECT_EQ(cuda::LaunchEmbed(nullptr, bad).code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// Residual add + LayerNorm in both of its uses: pre-norm (store x + δ + b, normalise into the
// GEMM input) and post-norm (normalise x + δ + b in place).
TEST(CudaKernelsTest, AddLayerNormMatchesCpuLayerNorm) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (int d : {32, 768, 1000}) {
    for (bool post : {false, true}) {
      SCOPED_TRACE(testing::Message() << "d " << d << (post ? " post" : " pre"));
      const int rows = 13;
      const float eps = 1e-5f;
      const std::vector<float> x0 = RandomFloats(static_cast<size_t>(rows) * d, 10, 20.0f);
      const std::vector<float> delta = RandomFloats(x0.size(), 11);
      const std::vector<float> bias = RandomFloats(d, 12);
      const std::vector<float> gamma = RandomFloats(d, 13);
      const std::vector<float> beta = RandomFloats(d, 14);
      std::vector<float> sum(x0.size());
      // x + (δ + b): the CPU backend's Linear adds the bias to the product before
      // accumulating into the residual.
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = x0[i] + (delta[i] + bias[i % d]);
      std::vector<float> expect(x0.size());
      cpu::LayerNorm(sum.data(), rows, d, gamma.data(), beta.data(), eps, expect.data());

      DeviceArray<float> x(x0), delta_dev(delta), bias_dev(bias), gamma_dev(gamma), beta_dev(beta);
      DeviceArray<uint8_t> y_t(x0.size() * sizeof(float));
      cuda::AddNormArgs args;
      args.x = x.get();
      args.delta = delta_dev.get();
      args.delta_bias = bias_dev.get();
      args.norm = cuda::NormType::kLayerNorm;
      args.gamma = gamma_dev.get();
      args.beta = beta_dev.get();
      args.eps = eps;
      args.y_t = y_t.get();
      args.rows = rows;
      args.d = d;
      args.dtype = DType::kF32;
      if (post) {
        args.y = x.get();
      } else {
        args.sum_out = x.get();
      }
      ASSERT_TRUE(cuda::LaunchAddNorm(nullptr, args).ok());
      EXPECT_LE(RelativeError(ToFloats(y_t, DType::kF32, expect.size()), expect), kFp32Tolerance);
      if (post) {
        EXPECT_LE(RelativeError(x.Download(), expect), kFp32Tolerance);
      } else {
        EXPECT_EQ(x.Download(), sum);  // the residual sum is stored exactly
      }
    }
  }
}

// Residual add + RMSNorm, the same fused kernel as LayerNorm's: pre-norm (store the residual sum,
// normalise into the GEMM input), post-norm (normalise in place, with its copy in T), with and
// without the delta's bias, and with no delta at all (a pre-norm model's first norm).
TEST(CudaKernelsTest, AddRmsNormMatchesCpuRmsNorm) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  struct Case {
    int d;
    bool delta, bias;
  };
  for (const Case& c : {Case{32, true, true}, Case{768, true, false}, Case{1000, true, true},
                        Case{1000, false, false}}) {
    for (bool post : {false, true}) {
      for (DType dtype : {DType::kF32, DType::kBf16}) {
        SCOPED_TRACE(testing::Message()
                     << "d " << c.d << (c.delta ? " delta" : "") << (c.bias ? " bias" : "")
                     << (post ? " post " : " pre ") << cuda::DTypeName(dtype));
        const int rows = 13, d = c.d;
        const float eps = 1e-5f;
        // A residual stream of a large mean and spread, as deep in a model.
        std::vector<float> x0 = RandomFloats(static_cast<size_t>(rows) * d, 20, 20.0f);
        for (float& v : x0) v += 30.0f;
        const std::vector<float> delta = RandomFloats(x0.size(), 21);
        const std::vector<float> bias = RandomFloats(d, 22);
        const std::vector<float> gamma = RandomFloats(d, 23);
        std::vector<float> sum = x0;
        for (size_t i = 0; c.delta && i < sum.size(); ++i) {
          sum[i] = x0[i] + (c.bias ? delta[i] + bias[i % d] : delta[i]);
        }
        std::vector<float> expect(x0.size());
        cpu::RmsNorm(sum.data(), rows, d, gamma.data(), eps, expect.data());
        std::vector<float> expect_t(expect.size());
        for (size_t i = 0; i < expect.size(); ++i) expect_t[i] = Round(dtype, expect[i]);

        DeviceArray<float> x(x0), delta_dev(delta), bias_dev(bias), gamma_dev(gamma);
        DeviceArray<uint8_t> y_t(x0.size() * cuda::DTypeSize(dtype));
        cuda::AddNormArgs args;
        args.x = x.get();
        args.delta = c.delta ? delta_dev.get() : nullptr;
        args.delta_bias = c.bias ? bias_dev.get() : nullptr;
        args.norm = cuda::NormType::kRmsNorm;
        args.gamma = gamma_dev.get();
        args.eps = eps;
        args.y_t = y_t.get();
        args.rows = rows;
        args.d = d;
        args.dtype = dtype;
        if (post) {
          args.y = x.get();
        } else {
          args.sum_out = x.get();
        }
        ASSERT_TRUE(cuda::LaunchAddNorm(nullptr, args).ok());
        // bf16: a last-ulp difference in fp32 can move a value across a bf16 rounding boundary.
        EXPECT_LE(RelativeError(ToFloats(y_t, dtype, expect.size()), expect_t),
                  dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
        if (post) {
          EXPECT_LE(RelativeError(x.Download(), expect), kFp32Tolerance);
        } else {
          EXPECT_EQ(x.Download(), sum);  // the residual sum is stored exactly
        }
      }
    }
  }
}

TEST(CudaKernelsTest, BiasActivationMatchesCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const int rows = 17, cols = 333;
  const std::vector<float> in = RandomFloats(static_cast<size_t>(rows) * cols, 15, 3.0f);
  const std::vector<float> bias = RandomFloats(cols, 16);
  DeviceArray<float> in_dev(in), bias_dev(bias);
  const std::pair<cuda::ActivationKind, cpu::Activation> kinds[] = {
      {cuda::ActivationKind::kGelu, cpu::Activation::kGelu},
      {cuda::ActivationKind::kGeluTanh, cpu::Activation::kGeluTanh},
      {cuda::ActivationKind::kRelu, cpu::Activation::kRelu}};
  for (const auto& [gpu_kind, cpu_kind] : kinds) {
    for (DType dtype : kTypes) {
      SCOPED_TRACE(testing::Message()
                   << static_cast<int>(cpu_kind) << " " << cuda::DTypeName(dtype));
      std::vector<float> expect(in.size());
      for (size_t i = 0; i < in.size(); ++i) expect[i] = in[i] + bias[i % cols];
      cpu::ApplyActivation(cpu_kind, expect.data(), static_cast<int64_t>(expect.size()));
      for (float& e : expect) e = Round(dtype, e);
      DeviceArray<uint8_t> out(in.size() * cuda::DTypeSize(dtype));
      ASSERT_TRUE(cuda::LaunchBiasActivation(nullptr, in_dev.get(), bias_dev.get(), rows, cols,
                                             gpu_kind, dtype, out.get())
                      .ok());
      // fp32: erf/tanh differ by a few ulp between CUDA and libmvec; bf16/fp16: such an ulp can
      // move a value across a rounding boundary of the narrow type.
      EXPECT_LE(RelativeError(ToFloats(out, dtype, in.size()), expect),
                dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
    }
  }
}

// The gated MLP's bias + value ⊙ act(gate) against the CPU's GatedProduct, for each gate
// activation, with and without fc1's bias, in every output type; one shape wider than the
// kernel's column grid (64 blocks of 256) so that its column stride loop runs.
TEST(CudaKernelsTest, BiasGateMatchesCpuGatedProduct) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const std::pair<cuda::ActivationKind, cpu::Activation> kinds[] = {
      {cuda::ActivationKind::kSilu, cpu::Activation::kSilu},
      {cuda::ActivationKind::kGelu, cpu::Activation::kGelu},
      {cuda::ActivationKind::kSigmoid, cpu::Activation::kSigmoid}};
  for (const auto& [rows, width] : {std::pair{17, 333}, std::pair{3, 17000}}) {
    std::vector<float> in = RandomFloats(static_cast<size_t>(rows) * 2 * width, 24, 3.0f);
    // A gate far in the negative tail, where exp(−x) overflows to inf (act → 0 or −0).
    in[width] = -95.0f;
    const std::vector<float> bias = RandomFloats(2 * static_cast<size_t>(width), 25);
    DeviceArray<float> in_dev(in), bias_dev(bias);
    for (const auto& [gpu_kind, cpu_kind] : kinds) {
      for (bool with_bias : {true, false}) {
        for (DType dtype : kTypes) {
          SCOPED_TRACE(testing::Message()
                       << rows << "x" << width << " " << static_cast<int>(cpu_kind)
                       << (with_bias ? " bias " : " no bias ") << cuda::DTypeName(dtype));
          std::vector<float> a = in;
          for (size_t i = 0; with_bias && i < a.size(); ++i) a[i] += bias[i % (2 * width)];
          std::vector<float> expect(static_cast<size_t>(rows) * width);
          cpu::GatedProduct(cpu_kind, a.data(), rows, width, expect.data());
          for (float& e : expect) e = Round(dtype, e);
          DeviceArray<uint8_t> out(expect.size() * cuda::DTypeSize(dtype));
          ASSERT_TRUE(cuda::LaunchBiasGate(nullptr, in_dev.get(),
                                           with_bias ? bias_dev.get() : nullptr, rows, width,
                                           gpu_kind, dtype, out.get())
                          .ok());
          // fp32: exp/erf differ by a few ulp between CUDA and libmvec; bf16/fp16: such an ulp
          // can move a value across a rounding boundary of the narrow type.
          EXPECT_LE(RelativeError(ToFloats(out, dtype, expect.size()), expect),
                    dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
        }
      }
    }
  }
}

// An MLP's first layer in one call (Gemm::LinearActivation) writes bitwise what the product
// (Gemm::Linear) and then the elementwise kernel write, on either of its paths: one fused launch
// for 1–4 rows of 16-bit types (a column count that leaves the last block part-empty), cuBLASLt
// and the elementwise kernel otherwise (5 rows; fp32) — every activation, with the gate and
// without, with fc1's bias and without.
TEST(CudaKernelsTest, LinearActivationEqualsTheProductThenItsEpilogue) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(size_t{4} << 20);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int64_t cols = 70, k = 96;
  const cuda::ActivationKind kinds[] = {
      cuda::ActivationKind::kGelu, cuda::ActivationKind::kGeluTanh, cuda::ActivationKind::kRelu,
      cuda::ActivationKind::kSilu, cuda::ActivationKind::kSigmoid};
  for (int64_t rows : {1, 2, 3, 4, 5}) {
    for (DType dtype : kTypes) {
      for (bool gate : {false, true}) {
        const int64_t n = gate ? 2 * cols : cols;
        TypedArray x = Upload(RandomFloats(static_cast<size_t>(rows * k), 31, 2.0f), dtype);
        TypedArray w = Upload(RandomFloats(static_cast<size_t>(n * k), 32, 0.2f), dtype);
        DeviceArray<float> bias(RandomFloats(static_cast<size_t>(n), 33));
        DeviceArray<float> product(static_cast<size_t>(rows * n));
        DeviceArray<float> scratch(static_cast<size_t>(rows * n));
        ASSERT_TRUE(
            (*gemm)
                ->Linear(nullptr, dtype, x.bytes.get(), w.bytes.get(), product.get(), rows, n, k)
                .ok());
        for (cuda::ActivationKind kind : kinds) {
          for (bool with_bias : {true, false}) {
            SCOPED_TRACE(testing::Message()
                         << rows << " rows " << cuda::DTypeName(dtype) << (gate ? " gate " : " ")
                         << static_cast<int>(kind) << (with_bias ? " bias" : " no bias"));
            const float* b = with_bias ? bias.get() : nullptr;
            const size_t bytes = static_cast<size_t>(rows * cols) * cuda::DTypeSize(dtype);
            DeviceArray<uint8_t> expect(bytes), got(bytes);
            ASSERT_TRUE((gate ? cuda::LaunchBiasGate(nullptr, product.get(), b, rows, cols, kind,
                                                     dtype, expect.get())
                              : cuda::LaunchBiasActivation(nullptr, product.get(), b, rows, cols,
                                                           kind, dtype, expect.get()))
                            .ok());
            const cuda::ActivationEpilogue epilogue{gate, kind, b};
            ASSERT_TRUE((*gemm)
                            ->LinearActivation(nullptr, dtype, x.bytes.get(), w.bytes.get(), rows,
                                               cols, k, epilogue, scratch.get(), got.get())
                            .ok());
            EXPECT_EQ(got.Download(), expect.Download());
          }
        }
      }
    }
  }
}

// A projection into the residual stream and the add + norm after it in one call
// (Gemm::LinearAddNorm) write bitwise what Gemm::Linear then LaunchAddNorm write, on both paths:
// one launch for 1–4 rows of 16-bit types (the last block to finish runs the norm; a width that
// leaves the last block part-empty, and one over the 4096 held in registers), cuBLASLt and the
// norm kernel otherwise — LayerNorm and RMSNorm, pre-norm (x += delta, the sum stored) and
// post-norm (x = norm(x + delta)), with the projection's bias and without.
TEST(CudaKernelsTest, LinearAddNormEqualsTheProductThenTheNorm) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create(size_t{4} << 20);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int64_t k = 24;
  for (const int64_t d : {100, 4104}) {
    const std::vector<float> gamma = RandomFloats(static_cast<size_t>(d), 41);
    const std::vector<float> beta = RandomFloats(static_cast<size_t>(d), 42);
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(d), 43);
    DeviceArray<float> gamma_dev(gamma), beta_dev(beta), bias_dev(bias);
    for (int64_t rows : {1, 3, 4, 5}) {
      const std::vector<float> x0 = RandomFloats(static_cast<size_t>(rows * d), 44, 3.0f);
      for (DType dtype : kTypes) {
        TypedArray in = Upload(RandomFloats(static_cast<size_t>(rows * k), 45), dtype);
        TypedArray w = Upload(RandomFloats(static_cast<size_t>(d * k), 46, 0.3f), dtype);
        for (cuda::NormType norm : {cuda::NormType::kLayerNorm, cuda::NormType::kRmsNorm}) {
          for (bool pre : {true, false}) {
            for (bool with_bias : {true, false}) {
              SCOPED_TRACE(testing::Message()
                           << d << " wide, " << rows << " rows " << cuda::DTypeName(dtype)
                           << (norm == cuda::NormType::kLayerNorm ? " layer_norm" : " rms_norm")
                           << (pre ? " pre" : " post") << (with_bias ? " bias" : " no bias"));
              // One set of outputs per path: the residual x, the product y, the normalised y_t.
              struct Outputs {
                DeviceArray<float> x, y;
                DeviceArray<uint8_t> y_t;
              };
              auto run = [&](bool fused) {
                Outputs o{
                    DeviceArray<float>(x0), DeviceArray<float>(static_cast<size_t>(rows * d)),
                    DeviceArray<uint8_t>(static_cast<size_t>(rows * d) * cuda::DTypeSize(dtype))};
                cuda::AddNormArgs a;
                a.x = o.x.get();
                a.delta_bias = with_bias ? bias_dev.get() : nullptr;
                (pre ? a.sum_out : a.y) = o.x.get();
                a.norm = norm;
                a.gamma = gamma_dev.get();
                a.beta = beta_dev.get();
                a.y_t = o.y_t.get();
                a.rows = static_cast<int>(rows);
                a.d = static_cast<int>(d);
                a.dtype = dtype;
                if (fused) {
                  EXPECT_TRUE((*gemm)
                                  ->LinearAddNorm(nullptr, dtype, in.bytes.get(), w.bytes.get(),
                                                  o.y.get(), rows, d, k, a)
                                  .ok());
                } else {
                  EXPECT_TRUE((*gemm)
                                  ->Linear(nullptr, dtype, in.bytes.get(), w.bytes.get(), o.y.get(),
                                           rows, d, k)
                                  .ok());
                  a.delta = o.y.get();
                  EXPECT_TRUE(cuda::LaunchAddNorm(nullptr, a).ok());
                }
                return o;
              };
              const Outputs expect = run(false);
              const Outputs got = run(true);
              EXPECT_EQ(got.y.Download(), expect.y.Download());
              EXPECT_EQ(got.x.Download(), expect.x.Download());
              EXPECT_EQ(got.y_t.Download(), expect.y_t.Download());
            }
          }
        }
      }
    }
  }
}

struct AttentionCase {
  const char* name;
  cuda::FeatureMapKind gpu_map;
  std::optional<cpu::FeatureMap> cpu_map;  // none: taylor, cpu::TaylorFeatureMap
  int heads, key_dim, head_dim, feature_dim;

  int64_t LayerFloats() const { return int64_t{heads} * feature_dim * (head_dim + 1); }
  int64_t QkvColumns() const { return int64_t{heads} * (2 * key_dim + head_dim); }
};

constexpr AttentionCase kAttentionCases[] = {
    {"elu_plus_one", cuda::FeatureMapKind::kEluPlusOne, cpu::FeatureMap::kEluPlusOne, 4, 8, 8, 8},
    {"relu", cuda::FeatureMapKind::kRelu, cpu::FeatureMap::kRelu, 3, 64, 64, 64},
    {"exp", cuda::FeatureMapKind::kExp, cpu::FeatureMap::kExp, 2, 48, 48, 48},
    {"favor_plus", cuda::FeatureMapKind::kFavorPlus, cpu::FeatureMap::kFavorPlus, 2, 16, 16, 40},
    {"elu_plus_one_125m", cuda::FeatureMapKind::kEluPlusOne, cpu::FeatureMap::kEluPlusOne, 12, 64,
     64, 64},
    // Based's Taylor map: q and k d_f wide, v head_dim wide, F = 1 + d_f + d_f² rows of S.
    {"taylor_4_16", cuda::FeatureMapKind::kTaylor, std::nullopt, 2, 4, 16, 21},
    {"taylor_16_64", cuda::FeatureMapKind::kTaylor, std::nullopt, 2, 16, 64, 273},
    // head_dim not a multiple of 4: decode's one-column-per-thread path for every head (the
    // others take the 4-column path where a head's S is 4-element aligned, the Taylor cases
    // both, head by head).
    {"relu_head_dim_6", cuda::FeatureMapKind::kRelu, cpu::FeatureMap::kRelu, 3, 6, 6, 6},
};

// The q/k/v rows, bias and favor projection of one attention test, plus the CPU's φ.
struct AttentionInputs {
  std::vector<float> qkv, bias, favor;
  std::vector<float> phi_q, phi_k, v;  // CPU: [rows·heads, F], [rows·heads, F], [rows, H·Dh]
};

AttentionInputs MakeAttentionInputs(const AttentionCase& c, int rows, uint64_t seed) {
  AttentionInputs in;
  const int64_t hk = int64_t{c.heads} * c.key_dim;
  const int64_t hd = int64_t{c.heads} * c.head_dim;
  const int64_t columns = c.QkvColumns();
  in.qkv = RandomFloats(static_cast<size_t>(rows * columns), seed, 0.7f);
  in.bias = RandomFloats(static_cast<size_t>(columns), seed + 1, 0.2f);
  in.favor = RandomFloats(static_cast<size_t>(c.feature_dim) * c.key_dim, seed + 2,
                          1.0f / std::sqrt(static_cast<float>(c.key_dim)));
  std::vector<float> q(static_cast<size_t>(rows * hk)), k(q.size());
  in.v.resize(static_cast<size_t>(rows * hd));
  for (int r = 0; r < rows; ++r) {
    const float* row = in.qkv.data() + r * columns;
    for (int64_t i = 0; i < hk; ++i) {
      q[r * hk + i] = row[i] + in.bias[i];
      k[r * hk + i] = row[hk + i] + in.bias[hk + i];
    }
    for (int64_t i = 0; i < hd; ++i) in.v[r * hd + i] = row[2 * hk + i] + in.bias[2 * hk + i];
  }
  const int64_t vectors = static_cast<int64_t>(rows) * c.heads;
  in.phi_q.resize(static_cast<size_t>(vectors) * c.feature_dim);
  in.phi_k.resize(in.phi_q.size());
  for (auto [x, phi] : {std::pair{&q, &in.phi_q}, std::pair{&k, &in.phi_k}}) {
    if (c.cpu_map.has_value()) {
      cpu::ApplyFeatureMap(*c.cpu_map, x->data(), vectors, c.key_dim, in.favor.data(),
                           c.feature_dim, phi->data());
    } else {
      cpu::TaylorFeatureMap(x->data(), vectors, c.key_dim, phi->data());
    }
  }
  return in;
}

// Feeds `tokens` rows of `in` to a layer state (the c.heads heads' S then z, as the kernels lay
// them out) token by token with cpu::LinearAttentionStep; out [tokens, H·Dh] gets the outputs.
void FeedRecurrence(const AttentionCase& c, const AttentionInputs& in, int tokens, float* state,
                    float* out) {
  const int64_t hd = int64_t{c.heads} * c.head_dim;
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      float* s = state + static_cast<int64_t>(h) * c.feature_dim * (c.head_dim + 1);
      const size_t phi = (static_cast<size_t>(t) * c.heads + h) * c.feature_dim;
      const size_t v = static_cast<size_t>(t * hd) + static_cast<size_t>(h) * c.head_dim;
      cpu::LinearAttentionStep(in.phi_q.data() + phi, in.phi_k.data() + phi, in.v.data() + v,
                               c.feature_dim, c.head_dim, 1e-6f, s,
                               s + static_cast<int64_t>(c.feature_dim) * c.head_dim, out + v);
    }
  }
}

// `count` layer states, each what the recurrence leaves after 5 random tokens: non-zero and
// consistent (z is the sum of the φ(k) whose products with v make S), so that the denominators
// φ(q)ᵀz stay away from zero even where φ has negative features (taylor).
std::vector<float> FedStates(const AttentionCase& c, int count, uint64_t seed) {
  const int tokens = 5;
  std::vector<float> states(static_cast<size_t>(count * c.LayerFloats()), 0.0f);
  std::vector<float> out(static_cast<size_t>(tokens) * c.heads * c.head_dim);
  for (int n = 0; n < count; ++n) {
    FeedRecurrence(c, MakeAttentionInputs(c, tokens, seed + 3 * n), tokens,
                   states.data() + n * c.LayerFloats(), out.data());
  }
  return states;
}

cuda::AttentionShape GpuShape(const AttentionCase& c, const float* favor) {
  cuda::AttentionShape shape;
  shape.heads = c.heads;
  shape.key_dim = c.key_dim;
  shape.head_dim = c.head_dim;
  shape.feature_dim = c.feature_dim;
  shape.feature_map = c.gpu_map;
  shape.favor = favor;
  shape.eps = 1e-6f;
  return shape;
}

TEST(CudaKernelsTest, FeatureMapsMatchCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionCase& c : kAttentionCases) {
    SCOPED_TRACE(c.name);
    const int rows = 11;
    const AttentionInputs in = MakeAttentionInputs(c, rows, 20);
    DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor);
    DeviceArray<float> phi_q(in.phi_q.size()), phi_k(in.phi_k.size());
    ASSERT_EQ(cuda::QkvColumns(GpuShape(c, favor.get())), c.QkvColumns());
    ASSERT_TRUE(cuda::LaunchFeatureMaps(nullptr, GpuShape(c, favor.get()), qkv.get(), bias.get(),
                                        rows, phi_q.get(), phi_k.get())
                    .ok());
    EXPECT_LE(RelativeError(phi_q.Download(), in.phi_q), kFp32Tolerance);
    EXPECT_LE(RelativeError(phi_k.Download(), in.phi_k), kFp32Tolerance);
  }
}

// The fused decode step against cpu::LinearAttentionDecode: outputs and the updated states of
// every slot in the batch, in a scattered slot order, with a padding row (slot -1) that must
// leave every state untouched.
TEST(CudaKernelsTest, DecodeAttentionMatchesCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionCase& c : kAttentionCases) {
    SCOPED_TRACE(c.name);
    const int real_rows = 6;
    const int rows = real_rows + 1;  // + one padding row
    const int slots = 9;
    const std::vector<int32_t> slot_of_row = {7, 2, 0, 5, 8, 3, -1};
    const int layers = 2, layer = 1;
    const int64_t layer_floats = c.LayerFloats();
    const int64_t slot_floats = layers * layer_floats;
    const std::vector<float> states = FedStates(c, slots * layers, 21);
    const AttentionInputs in = MakeAttentionInputs(c, rows, 22);

    std::vector<float> expect_states = states;
    std::vector<float*> row_states;
    for (int r = 0; r < real_rows; ++r) {
      row_states.push_back(expect_states.data() + slot_of_row[r] * slot_floats +
                           layer * layer_floats);
    }
    const int hd = c.heads * c.head_dim;
    std::vector<float> expect_out(static_cast<size_t>(real_rows) * hd);
    cpu::AttentionShape cpu_shape{c.heads, c.feature_dim, c.head_dim, 1e-6f};
    cpu::LinearAttentionDecode(cpu_shape, real_rows, in.phi_q.data(), in.phi_k.data(), in.v.data(),
                               row_states.data(), expect_out.data(), 1);

    for (DType dtype : kTypes) {
      SCOPED_TRACE(cuda::DTypeName(dtype));
      DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor), state(states);
      DeviceArray<int32_t> slot_dev(slot_of_row);
      DeviceArray<uint8_t> out(static_cast<size_t>(rows) * hd * cuda::DTypeSize(dtype));
      cuda::DecodeAttentionArgs args;
      args.shape = GpuShape(c, favor.get());
      args.qkv = qkv.get();
      args.qkv_bias = bias.get();
      args.slots = slot_dev.get();
      args.state = state.get();
      args.slot_stride = slot_floats;
      args.layer_offset = layer * layer_floats;
      args.rows = rows;
      args.out_dtype = dtype;
      args.out = out.get();
      ASSERT_TRUE(cuda::LaunchDecodeAttention(nullptr, args).ok());
      std::vector<float> got = ToFloats(out, dtype, static_cast<size_t>(rows) * hd);
      got.resize(expect_out.size());  // the padding row's output is unspecified
      std::vector<float> expect_t = expect_out;
      for (float& e : expect_t) e = Round(dtype, e);
      EXPECT_LE(RelativeError(got, expect_t), dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
      // The state is fp32 whatever the output type; untouched slots (1, 4, 6 and layer 0 of
      // all) compare exactly because the reference copied them.
      EXPECT_LE(RelativeError(state.Download(), expect_states), kFp32Tolerance);
    }
  }
}

// A bf16 state stores each element once rounded to nearest even from its fp32 value: the stored
// state is within one bf16 ulp (2^-7 of the element, so of the largest) of the fp32 recurrence
// run from the same (bf16) starting values.
constexpr double kBf16StateTolerance = 1.0 / 128;

// The decode step on a bf16 state: it widens S and z to fp32, so its outputs are the fp32
// recurrence's from the rounded state (fp32 tolerance), and stores the updated state rounded.
TEST(CudaKernelsTest, DecodeAttentionBf16StateAccumulatesInFp32) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionCase& c : kAttentionCases) {
    SCOPED_TRACE(c.name);
    const int real_rows = 4;
    const int rows = real_rows + 1;  // + one padding row
    const int slots = 5;
    const std::vector<int32_t> slot_of_row = {3, 0, 4, 1, -1};
    const int layers = 2, layer = 1;
    const int64_t layer_floats = c.LayerFloats();
    const int64_t slot_floats = layers * layer_floats;
    const TypedArray state = Upload(FedStates(c, slots * layers, 31), DType::kBf16);
    const AttentionInputs in = MakeAttentionInputs(c, rows, 32);

    std::vector<float> expect_states = state.rounded;
    std::vector<float*> row_states;
    for (int r = 0; r < real_rows; ++r) {
      row_states.push_back(expect_states.data() + slot_of_row[r] * slot_floats +
                           layer * layer_floats);
    }
    const int hd = c.heads * c.head_dim;
    std::vector<float> expect_out(static_cast<size_t>(real_rows) * hd);
    cpu::AttentionShape cpu_shape{c.heads, c.feature_dim, c.head_dim, 1e-6f};
    cpu::LinearAttentionDecode(cpu_shape, real_rows, in.phi_q.data(), in.phi_k.data(), in.v.data(),
                               row_states.data(), expect_out.data(), 1);

    DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor);
    DeviceArray<int32_t> slot_dev(slot_of_row);
    DeviceArray<uint8_t> out(static_cast<size_t>(rows) * hd * sizeof(float));
    cuda::DecodeAttentionArgs args;
    args.shape = GpuShape(c, favor.get());
    args.qkv = qkv.get();
    args.qkv_bias = bias.get();
    args.slots = slot_dev.get();
    args.state = state.bytes.get();
    args.state_dtype = DType::kBf16;
    args.slot_stride = slot_floats;
    args.layer_offset = layer * layer_floats;
    args.rows = rows;
    args.out_dtype = DType::kF32;
    args.out = out.get();
    ASSERT_TRUE(cuda::LaunchDecodeAttention(nullptr, args).ok());
    std::vector<float> got = ToFloats(out, DType::kF32, static_cast<size_t>(rows) * hd);
    got.resize(expect_out.size());
    EXPECT_LE(RelativeError(got, expect_out), kFp32Tolerance);
    const std::vector<float> got_states = ToFloats(state.bytes, DType::kBf16, expect_states.size());
    EXPECT_LE(RelativeError(got_states, expect_states), kBf16StateTolerance);
    // Slots 2 and layer 0 of every slot are untouched: bitwise their rounded start.
    for (int64_t i = 2 * slot_floats; i < 3 * slot_floats; ++i) {
      ASSERT_EQ(got_states[static_cast<size_t>(i)], state.rounded[static_cast<size_t>(i)]) << i;
    }
  }
  cuda::DecodeAttentionArgs half;
  half.shape = GpuShape(kAttentionCases[0], nullptr);
  half.state_dtype = DType::kF16;
  EXPECT_THAT(cuda::LaunchDecodeAttention(nullptr, half).message(),
              testing::HasSubstr("state_dtype fp16 is not fp32 or bf16"));
}

// A prefill pass's tables on the device (kernels/cuda/prefill_pieces.h).
struct DeviceTables {
  explicit DeviceTables(const cuda::PrefillTableBuilder& built)
      : pieces(built.pieces()),
        chunks(built.chunks()),
        tables(built.On(pieces.get(), chunks.get())) {}
  DeviceArray<cuda::PrefillPiece> pieces;
  DeviceArray<cuda::PrefillChunk> chunks;
  cuda::PrefillTables tables;
};

// Pieces of rows[i] rows of slots[i], in row order.
cuda::PrefillTableBuilder Pieces(const std::vector<int>& rows, const std::vector<int32_t>& slots,
                                 int chunk) {
  cuda::PrefillTableBuilder built(chunk);
  for (size_t i = 0; i < rows.size(); ++i) built.Add(slots[i], rows[i]);
  return built;
}

// One session's `rows` rows, slot 0 (the state pointer is the session's own).
cuda::PrefillTableBuilder OnePiece(int rows, int chunk) { return Pieces({rows}, {0}, chunk); }

// A varlen prefill kernel's launch twice over the pieces of `rows` rows of `slots`: all of
// them in one launch, then each alone. `aim(args, first, tables, together)` points `args` at
// pass row `first` (its input and output rows) with `tables`, and at the state and output
// buffers of the together run or of the alone one.
template <typename Args>
void LaunchTogetherThenAlone(
    Args args, const std::vector<int>& rows, const std::vector<int32_t>& slots, int chunk,
    const std::function<void(Args&, size_t, const cuda::PrefillTables&, bool)>& aim,
    const std::function<absl::Status(const Args&)>& launch) {
  const DeviceTables tables(Pieces(rows, slots, chunk));
  aim(args, 0, tables.tables, /*together=*/true);
  ASSERT_TRUE(launch(args).ok());
  for (size_t p = 0, first = 0; p < rows.size(); first += static_cast<size_t>(rows[p++])) {
    const DeviceTables piece(Pieces({rows[p]}, {slots[p]}, chunk));
    aim(args, first, piece.tables, /*together=*/false);
    ASSERT_TRUE(launch(args).ok());
  }
}

// Chunked prefill on a bf16 state: the chunks carry the state in fp32 (outputs within fp32
// tolerance of the recurrence from the rounded start) and round it once at the end.
TEST(CudaKernelsTest, PrefillAttentionBf16StateMatchesRecurrence) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionCase& c : kAttentionCases) {
    SCOPED_TRACE(c.name);
    const int hd = c.heads * c.head_dim;
    const int tokens = 150, chunk = 64;
    const TypedArray state = Upload(FedStates(c, 1, 33), DType::kBf16);
    const AttentionInputs in = MakeAttentionInputs(c, tokens, 34);
    std::vector<float> expect_state = state.rounded;
    std::vector<float> expect_out(static_cast<size_t>(tokens) * hd);
    FeedRecurrence(c, in, tokens, expect_state.data(), expect_out.data());
    DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor);
    DeviceArray<uint8_t> out(static_cast<size_t>(tokens) * hd * sizeof(float));
    const cuda::AttentionShape shape = GpuShape(c, favor.get());
    DeviceArray<float> scratch(
        static_cast<size_t>(cuda::PrefillAttentionScratchFloats(shape, tokens, chunk)));
    const DeviceTables tables(OnePiece(tokens, chunk));
    cuda::PrefillAttentionArgs args;
    args.shape = shape;
    args.qkv = qkv.get();
    args.qkv_bias = bias.get();
    args.tables = tables.tables;
    args.state = state.bytes.get();
    args.state_dtype = DType::kBf16;
    args.scratch = scratch.get();
    args.out_dtype = DType::kF32;
    args.out = out.get();
    ASSERT_TRUE(cuda::LaunchPrefillAttention(nullptr, args).ok());
    EXPECT_LE(RelativeError(ToFloats(out, DType::kF32, expect_out.size()), expect_out),
              kFp32Tolerance);
    EXPECT_LE(RelativeError(ToFloats(state.bytes, DType::kBf16, expect_state.size()),
                            expect_state),
              kBf16StateTolerance);
  }
}

// Chunked prefill of 1, 7, 64 and 150 tokens from a fed (non-zero) state against the
// token-by-token recurrence (cpu::LinearAttentionStep), for chunk sizes that divide the prompt,
// leave a ragged last chunk, and exceed it.
TEST(CudaKernelsTest, PrefillAttentionMatchesRecurrence) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionCase& c : kAttentionCases) {
    SCOPED_TRACE(c.name);
    const int hd = c.heads * c.head_dim;
    const std::vector<float> initial = FedStates(c, 1, 23);
    for (int tokens : {1, 7, 64, 150}) {
      SCOPED_TRACE(tokens);
      const AttentionInputs in = MakeAttentionInputs(c, tokens, 24);
      std::vector<float> expect_state = initial;
      std::vector<float> expect_out(static_cast<size_t>(tokens) * hd);
      FeedRecurrence(c, in, tokens, expect_state.data(), expect_out.data());
      for (int chunk : {1, 7, 64, 128}) {
        SCOPED_TRACE(chunk);
        DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor), state(initial);
        DeviceArray<uint8_t> out(static_cast<size_t>(tokens) * hd * sizeof(float));
        const cuda::AttentionShape shape = GpuShape(c, favor.get());
        DeviceArray<float> scratch(
            static_cast<size_t>(cuda::PrefillAttentionScratchFloats(shape, tokens, chunk)));
        const DeviceTables tables(OnePiece(tokens, chunk));
        cuda::PrefillAttentionArgs args;
        args.shape = shape;
        args.qkv = qkv.get();
        args.qkv_bias = bias.get();
        args.tables = tables.tables;
        args.state = state.get();
        args.scratch = scratch.get();
        args.out_dtype = DType::kF32;
        args.out = out.get();
        ASSERT_TRUE(cuda::LaunchPrefillAttention(nullptr, args).ok());
        EXPECT_LE(RelativeError(ToFloats(out, DType::kF32, expect_out.size()), expect_out),
                  kFp32Tolerance);
        EXPECT_LE(RelativeError(state.Download(), expect_state), kFp32Tolerance);
      }
    }
  }
}

// Varlen: the pieces of a pass (1, 70, 7, 64 and 3 rows, of slots out of order, each slot two
// layers, the second one's state fed) in one launch sequence give bitwise the outputs and
// states of each piece launched alone, for an fp32 and a bf16 state and chunks 7 and 64; the
// first layer of every slot is untouched.
TEST(CudaKernelsTest, PrefillAttentionVarlenEqualsEachPieceAlone) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<int> rows = {1, 70, 7, 64, 3};
  const std::vector<int32_t> slots = {3, 0, 2, 4, 1};
  const int total = 145;
  for (const AttentionCase& c : kAttentionCases) {
    if (std::string(c.name) != "elu_plus_one" && std::string(c.name) != "favor_plus" &&
        std::string(c.name) != "taylor_4_16") {
      continue;
    }
    SCOPED_TRACE(c.name);
    const int64_t layer = c.LayerFloats();
    const int64_t columns = c.QkvColumns();
    const int64_t hd = int64_t{c.heads} * c.head_dim;
    const std::vector<float> initial = FedStates(c, 10, 61);  // 5 slots × 2 layers
    const AttentionInputs in = MakeAttentionInputs(c, total, 62);
    DeviceArray<float> qkv(in.qkv), bias(in.bias), favor(in.favor);
    const cuda::AttentionShape shape = GpuShape(c, favor.get());
    for (DType state_dtype : {DType::kF32, DType::kBf16}) {
      for (int chunk : {7, 64}) {
        SCOPED_TRACE(testing::Message() << cuda::DTypeName(state_dtype) << ", chunk " << chunk);
        DeviceArray<float> scratch(
            static_cast<size_t>(cuda::PrefillAttentionScratchFloats(shape, total, chunk)));
        cuda::PrefillAttentionArgs args;
        args.shape = shape;
        args.qkv_bias = bias.get();
        args.state_dtype = state_dtype;
        args.slot_stride = 2 * layer;
        args.layer_offset = layer;
        args.scratch = scratch.get();
        args.out_dtype = DType::kF32;
        const TypedArray together = Upload(initial, state_dtype);
        const TypedArray alone = Upload(initial, state_dtype);
        DeviceArray<uint8_t> out_together(static_cast<size_t>(total * hd) * sizeof(float));
        DeviceArray<uint8_t> out_alone(static_cast<size_t>(total * hd) * sizeof(float));
        LaunchTogetherThenAlone<cuda::PrefillAttentionArgs>(
            args, rows, slots, chunk,
            [&](cuda::PrefillAttentionArgs& a, size_t first, const cuda::PrefillTables& tables,
                bool both) {
              a.qkv = qkv.get() + first * columns;
              a.tables = tables;
              a.state = (both ? together : alone).bytes.get();
              a.out = (both ? out_together : out_alone).get() +
                      first * static_cast<size_t>(hd) * sizeof(float);
            },
            [](const cuda::PrefillAttentionArgs& a) {
              return cuda::LaunchPrefillAttention(nullptr, a);
            });
        EXPECT_EQ(out_together.Download(), out_alone.Download());
        const std::vector<float> got = ToFloats(together.bytes, state_dtype, initial.size());
        EXPECT_EQ(got, ToFloats(alone.bytes, state_dtype, initial.size()));
        for (int slot = 0; slot < 5; ++slot) {
          for (int64_t i = 0; i < layer; ++i) {
            const size_t at = static_cast<size_t>(slot * 2 * layer + i);
            ASSERT_EQ(got[at], together.rounded[at]) << "slot " << slot << " layer 0";
          }
        }
        EXPECT_NE(got, together.rounded);
      }
    }
  }
}

TEST(CudaKernelsTest, AttentionRejectsShapesOutOfRange) {
  cuda::AttentionShape shape;
  shape.heads = 1;
  shape.key_dim = 8;
  shape.head_dim = cuda::kMaxAttentionHeadDim + 1;
  shape.feature_dim = 8;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(), testing::HasSubstr("head_dim"));
  shape.head_dim = 8;
  shape.key_dim = 0;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(), testing::HasSubstr("key_dim 0"));
  shape.key_dim = 8;
  shape.feature_dim = 9;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(),
              testing::HasSubstr("must equal key_dim 8"));
  shape.feature_map = cuda::FeatureMapKind::kTaylor;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(),
              testing::HasSubstr("must equal 1 + key_dim + key_dim² = 73"));
  shape.feature_dim = 73;
  EXPECT_TRUE(cuda::CheckAttentionShape(shape).ok());
  shape.key_dim = 128;  // 1 + 128 + 128² features exceed kMaxAttentionFeatureDim
  shape.feature_dim = 1 + 128 + 128 * 128;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(), testing::HasSubstr("feature_dim"));
  shape.key_dim = 8;
  shape.feature_dim = 40;
  shape.feature_map = cuda::FeatureMapKind::kFavorPlus;
  EXPECT_THAT(cuda::CheckAttentionShape(shape).message(), testing::HasSubstr("projection"));
  cuda::PrefillAttentionArgs args;
  args.shape.heads = 1;
  args.shape.key_dim = args.shape.head_dim = args.shape.feature_dim = 8;
  args.tables.chunk = cuda::kMaxPrefillChunk + 1;
  EXPECT_THAT(cuda::LaunchPrefillAttention(nullptr, args).message(), testing::HasSubstr("chunk"));
}

// ---- short_conv: against cpu::ShortConvStep token by token ----

struct ConvCase {
  const char* name;
  int channels, kernel;
  bool conv_bias;
};

// Channel counts below, at and across the 256-thread blocks.
constexpr ConvCase kConvCases[] = {
    {"k2_bias", 40, 2, true},
    {"k3_bias", 300, 3, true},
    {"k4_nobias", 37, 4, false},
    {"k3_nobias_block", 256, 3, false},
};

struct ConvInputs {
  std::vector<float> a;          // [rows, 2·channels], without in_proj's bias
  std::vector<float> in_bias;    // [2·channels]
  std::vector<float> weight;     // [channels, kernel] (conv.weight)
  std::vector<float> taps;       // [kernel, channels], as cpu::ShortConvStep reads them
  std::vector<float> conv_bias;  // [channels] or empty
};

ConvInputs MakeConvInputs(const ConvCase& c, int rows, uint64_t seed) {
  ConvInputs in;
  in.a = RandomFloats(static_cast<size_t>(rows) * 2 * c.channels, seed);
  in.in_bias = RandomFloats(2 * static_cast<size_t>(c.channels), seed + 1, 0.1f);
  in.weight = RandomFloats(static_cast<size_t>(c.channels) * c.kernel, seed + 2, 0.6f);
  in.taps.resize(in.weight.size());
  for (int ch = 0; ch < c.channels; ++ch) {
    for (int j = 0; j < c.kernel; ++j) {
      in.taps[static_cast<size_t>(j) * c.channels + ch] =
          in.weight[static_cast<size_t>(ch) * c.kernel + j];
    }
  }
  if (c.conv_bias) in.conv_bias = RandomFloats(static_cast<size_t>(c.channels), seed + 3, 0.1f);
  return in;
}

// One CPU step of row `row` of in.a (in_proj's bias added first, as the CPU's Linear does).
void ConvStep(const ConvCase& c, const ConvInputs& in, int row, float* history, float* y) {
  std::vector<float> ug(2 * static_cast<size_t>(c.channels));
  for (size_t i = 0; i < ug.size(); ++i) ug[i] = in.a[row * ug.size() + i] + in.in_bias[i];
  cpu::ShortConvStep(ug.data(), ug.data() + c.channels, c.channels, c.kernel, in.taps.data(),
                     in.conv_bias.empty() ? nullptr : in.conv_bias.data(), history, y);
}

cuda::ShortConvShape ConvShape(const ConvCase& c, const DeviceArray<float>& in_bias,
                               const DeviceArray<float>& weight,
                               const DeviceArray<float>& conv_bias) {
  cuda::ShortConvShape shape;
  shape.channels = c.channels;
  shape.kernel = c.kernel;
  shape.in_bias = in_bias.get();
  shape.weight = weight.get();
  shape.conv_bias = c.conv_bias ? conv_bias.get() : nullptr;
  return shape;
}

TEST(CudaKernelsTest, DecodeShortConvMatchesCpu) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(c.name);
    const int real_rows = 6;
    const int rows = real_rows + 1;  // + one padding row
    const int slots = 9;
    const std::vector<int32_t> slot_of_row = {7, 2, 0, 5, 8, 3, -1};
    const int layers = 2, layer = 1;
    const int64_t layer_floats = static_cast<int64_t>(c.kernel - 1) * c.channels;
    const int64_t slot_floats = layers * layer_floats;
    const std::vector<float> states = RandomFloats(static_cast<size_t>(slots * slot_floats), 31);
    const ConvInputs in = MakeConvInputs(c, rows, 32);

    std::vector<float> expect_states = states;
    std::vector<float> expect_out(static_cast<size_t>(real_rows) * c.channels);
    for (int r = 0; r < real_rows; ++r) {
      ConvStep(c, in, r,
               expect_states.data() + slot_of_row[r] * slot_floats + layer * layer_floats,
               expect_out.data() + static_cast<size_t>(r) * c.channels);
    }

    for (DType dtype : kTypes) {
      SCOPED_TRACE(cuda::DTypeName(dtype));
      DeviceArray<float> a(in.a), in_bias(in.in_bias), weight(in.weight), state(states);
      DeviceArray<float> conv_bias(in.conv_bias);
      DeviceArray<int32_t> slot_dev(slot_of_row);
      DeviceArray<uint8_t> out(static_cast<size_t>(rows) * c.channels * cuda::DTypeSize(dtype));
      cuda::DecodeShortConvArgs args;
      args.shape = ConvShape(c, in_bias, weight, conv_bias);
      args.a = a.get();
      args.slots = slot_dev.get();
      args.state = state.get();
      args.slot_stride = slot_floats;
      args.layer_offset = layer * layer_floats;
      args.rows = rows;
      args.out_dtype = dtype;
      args.out = out.get();
      ASSERT_TRUE(cuda::LaunchDecodeShortConv(nullptr, args).ok());
      std::vector<float> got = ToFloats(out, dtype, static_cast<size_t>(rows) * c.channels);
      got.resize(expect_out.size());  // the padding row's output is unspecified
      std::vector<float> expect_t = expect_out;
      for (float& e : expect_t) e = Round(dtype, e);
      // fp32: expf's last ulp (CUDA against libmvec); bf16/fp16: such an ulp can move a value
      // across a rounding boundary of the narrow type.
      EXPECT_LE(RelativeError(got, expect_t), dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
      // The state only moves u values (u = a + bias, one rounding on both sides): bitwise equal,
      // the padding row's slot-free step writing nothing, untouched slots (1, 4, 6, layer 0)
      // left as they were.
      EXPECT_EQ(state.Download(), expect_states);
    }
  }
}

// A bf16 history (--state_precision=bf16): the step reads it widened, convolves in fp32 with the
// current u unrounded, and stores u rounded to nearest even; the rows it only moves stay bitwise.
TEST(CudaKernelsTest, DecodeShortConvBf16StateStoresRoundedInputs) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(c.name);
    const int rows = 3;
    const std::vector<int32_t> slot_of_row = {2, 0, -1};  // + one padding row
    const int64_t slot_floats = static_cast<int64_t>(c.kernel - 1) * c.channels;
    const TypedArray state =
        Upload(RandomFloats(static_cast<size_t>(3 * slot_floats), 35), DType::kBf16);
    const ConvInputs in = MakeConvInputs(c, rows, 36);
    std::vector<float> expect_states = state.rounded;
    std::vector<float> expect_out(static_cast<size_t>(2) * c.channels);
    for (int r = 0; r < 2; ++r) {
      ConvStep(c, in, r, expect_states.data() + slot_of_row[r] * slot_floats,
               expect_out.data() + static_cast<size_t>(r) * c.channels);
    }
    for (float& e : expect_states) e = gpu_test::RoundBf16(e);

    DeviceArray<float> a(in.a), in_bias(in.in_bias), weight(in.weight), conv_bias(in.conv_bias);
    DeviceArray<int32_t> slot_dev(slot_of_row);
    DeviceArray<uint8_t> out(static_cast<size_t>(rows) * c.channels * sizeof(float));
    cuda::DecodeShortConvArgs args;
    args.shape = ConvShape(c, in_bias, weight, conv_bias);
    args.a = a.get();
    args.slots = slot_dev.get();
    args.state = state.bytes.get();
    args.state_dtype = DType::kBf16;
    args.slot_stride = slot_floats;
    args.rows = rows;
    args.out_dtype = DType::kF32;
    args.out = out.get();
    ASSERT_TRUE(cuda::LaunchDecodeShortConv(nullptr, args).ok());
    std::vector<float> got = ToFloats(out, DType::kF32, static_cast<size_t>(rows) * c.channels);
    got.resize(expect_out.size());
    EXPECT_LE(RelativeError(got, expect_out), kFp32Tolerance);
    EXPECT_EQ(ToFloats(state.bytes, DType::kBf16, expect_states.size()), expect_states);
  }
  const DeviceArray<float> taps(std::vector<float>(2));
  cuda::DecodeShortConvArgs half;
  half.shape.channels = 1;
  half.shape.kernel = 2;
  half.shape.weight = taps.get();
  half.state_dtype = DType::kF16;
  EXPECT_THAT(cuda::LaunchDecodeShortConv(nullptr, half).message(),
              testing::HasSubstr("state_dtype fp16 is not fp32 or bf16"));
}

// Pieces of 1, 2, 5 and 70 tokens fed one after the other into one non-zero state (so pieces
// shorter than kernel − 1 keep older state rows), each against the CPU's token-by-token steps.
TEST(CudaKernelsTest, PrefillShortConvMatchesRecurrence) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<int> pieces = {1, 2, 5, 70};
  int tokens = 0;
  for (int n : pieces) tokens += n;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(c.name);
    const int64_t layer_floats = static_cast<int64_t>(c.kernel - 1) * c.channels;
    const std::vector<float> initial = RandomFloats(static_cast<size_t>(layer_floats), 33);
    const ConvInputs in = MakeConvInputs(c, tokens, 34);
    std::vector<float> expect_state = initial;
    std::vector<std::vector<float>> expect_states;  // after each piece
    std::vector<float> expect_out(static_cast<size_t>(tokens) * c.channels);
    for (int t = 0, p = 0; p < static_cast<int>(pieces.size()); ++p) {
      for (int end = t + pieces[p]; t < end; ++t) {
        ConvStep(c, in, t, expect_state.data(),
                 expect_out.data() + static_cast<size_t>(t) * c.channels);
      }
      expect_states.push_back(expect_state);
    }
    for (DType dtype : kTypes) {
      SCOPED_TRACE(cuda::DTypeName(dtype));
      const size_t width = cuda::DTypeSize(dtype);
      DeviceArray<float> a(in.a), in_bias(in.in_bias), weight(in.weight), state(initial);
      DeviceArray<float> conv_bias(in.conv_bias);
      DeviceArray<uint8_t> out(static_cast<size_t>(tokens) * c.channels * width);
      for (int first = 0, p = 0; p < static_cast<int>(pieces.size()); first += pieces[p++]) {
        SCOPED_TRACE(testing::Message() << "piece of " << pieces[p]);
        const DeviceTables tables(OnePiece(pieces[p], 64));
        cuda::PrefillShortConvArgs args;
        args.shape = ConvShape(c, in_bias, weight, conv_bias);
        args.a = a.get() + static_cast<size_t>(first) * 2 * c.channels;
        args.tables = tables.tables;
        args.state = state.get();
        args.out_dtype = dtype;
        args.out = out.get() + static_cast<size_t>(first) * c.channels * width;
        ASSERT_TRUE(cuda::LaunchPrefillShortConv(nullptr, args).ok());
        EXPECT_EQ(state.Download(), expect_states[p]);
      }
      std::vector<float> expect_t = expect_out;
      for (float& e : expect_t) e = Round(dtype, e);
      EXPECT_LE(RelativeError(ToFloats(out, dtype, expect_t.size()), expect_t),
                dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
    }
  }
}

// Varlen: the pieces of a pass (1, 2, 5 and 70 rows, of slots out of order, from non-zero
// states) in two launches give bitwise the outputs and states of each piece launched alone.
TEST(CudaKernelsTest, PrefillShortConvVarlenEqualsEachPieceAlone) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<int> rows = {1, 2, 5, 70};
  const std::vector<int32_t> slots = {2, 0, 3, 1};
  const int total = 78;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(c.name);
    const int64_t layer = static_cast<int64_t>(c.kernel - 1) * c.channels;
    const std::vector<float> initial = RandomFloats(static_cast<size_t>(4 * layer), 71);
    const ConvInputs in = MakeConvInputs(c, total, 72);
    DeviceArray<float> a(in.a), in_bias(in.in_bias), weight(in.weight), conv_bias(in.conv_bias);
    DeviceArray<float> together(initial), alone(initial);
    const size_t out_bytes = static_cast<size_t>(total) * c.channels * sizeof(float);
    DeviceArray<uint8_t> out_together(out_bytes), out_alone(out_bytes);
    cuda::PrefillShortConvArgs args;
    args.shape = ConvShape(c, in_bias, weight, conv_bias);
    args.slot_stride = layer;
    args.out_dtype = DType::kF32;
    LaunchTogetherThenAlone<cuda::PrefillShortConvArgs>(
        args, rows, slots, 64,
        [&](cuda::PrefillShortConvArgs& x, size_t first, const cuda::PrefillTables& tables,
            bool both) {
          x.a = a.get() + first * 2 * c.channels;
          x.tables = tables;
          x.state = (both ? together : alone).get();
          x.out = (both ? out_together : out_alone).get() + first * c.channels * sizeof(float);
        },
        [](const cuda::PrefillShortConvArgs& x) {
          return cuda::LaunchPrefillShortConv(nullptr, x);
        });
    EXPECT_EQ(out_together.Download(), out_alone.Download());
    EXPECT_EQ(together.Download(), alone.Download());
    EXPECT_NE(together.Download(), initial);
  }
}

TEST(CudaKernelsTest, ShortConvRejectsShapesOutOfRange) {
  const float weight = 1.0f;
  cuda::ShortConvShape shape;
  shape.channels = 8;
  shape.kernel = 3;
  shape.weight = &weight;
  EXPECT_TRUE(cuda::CheckShortConvShape(shape).ok());
  shape.kernel = cuda::kMinShortConvKernel - 1;
  EXPECT_THAT(cuda::CheckShortConvShape(shape).message(), testing::HasSubstr("kernel_size 1"));
  shape.kernel = cuda::kMaxShortConvKernel + 1;
  EXPECT_THAT(cuda::CheckShortConvShape(shape).message(), testing::HasSubstr("kernel_size 65"));
  shape.kernel = 3;
  shape.channels = 0;
  EXPECT_THAT(cuda::CheckShortConvShape(shape).message(), testing::HasSubstr("d_inner 0"));
  shape.channels = 8;
  shape.weight = nullptr;
  EXPECT_THAT(cuda::CheckShortConvShape(shape).message(), testing::HasSubstr("conv.weight"));
  cuda::PrefillShortConvArgs args;
  args.shape = shape;
  args.tables.rows = 4;
  args.tables.piece_count = 1;
  EXPECT_EQ(cuda::LaunchPrefillShortConv(nullptr, args).code(),
            absl::StatusCode::kInvalidArgument);
}

struct WindowCase {
  const char* name;
  int heads, head_dim, window, rotary_dim;
  bool bias;
};

// Windows 1 (no ring), 2, 4 and 80 (more than one tile of keys); rotary_dim below head_dim; a
// head wider than the block.
constexpr WindowCase kWindowCases[] = {
    {"window1", 2, 8, 1, 8, true},        {"window2", 3, 16, 2, 8, false},
    {"window4", 2, 8, 4, 4, true},        {"window80", 2, 64, 80, 32, true},
    {"window4_wide", 1, 160, 4, 160, false},
};

cuda::SlidingWindowShape WindowShape(const WindowCase& c) {
  cuda::SlidingWindowShape shape;
  shape.heads = c.heads;
  shape.head_dim = c.head_dim;
  shape.window = c.window;
  shape.rotary_dim = c.rotary_dim;
  shape.rope_base = 10000;
  return shape;
}

// The shape's rotation table, filled once as the backend's layer does (its Prepare).
DeviceArray<float> RotationTable(const cuda::SlidingWindowShape& shape) {
  DeviceArray<float> table(static_cast<size_t>(cuda::SlidingWindowRotationFloats(shape)));
  EXPECT_TRUE(cuda::LaunchSlidingWindowRotationTable(nullptr, shape, table.get()).ok());
  return table;
}

int64_t WindowSliceFloats(const WindowCase& c) {
  return static_cast<int64_t>(c.window - 1) * c.heads * 2 * c.head_dim + 2;
}

// One token's step on a state slice, written out as the CPU backend takes it
// (model/backend/cpu/cpu_sliding_window_attention.cc): the rotation's cos and sin in double
// rounded to fp32, the scores of the stored tokens oldest first and then the token's own, the
// max-subtracted softmax, then the token's k and v into entry next and the counters advanced.
void WindowReferenceStep(const WindowCase& c, const float* qkv_row, const std::vector<float>& bias,
                         float* slice, float* out) {
  const int dh = c.head_dim, half = c.rotary_dim / 2;
  const int64_t hd = static_cast<int64_t>(c.heads) * dh;
  const int64_t ring = c.window - 1;
  const int64_t entry_floats = 2 * hd;
  float* counters = slice + ring * entry_floats;
  const int64_t count = static_cast<int64_t>(counters[0]);
  const int64_t next = static_cast<int64_t>(counters[1]);
  std::vector<float> x(static_cast<size_t>(3 * hd));
  for (int64_t i = 0; i < 3 * hd; ++i) x[i] = qkv_row[i] + (c.bias ? bias[i] : 0.0f);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  for (int h = 0; h < c.heads; ++h) {
    const float* q = x.data() + h * dh;
    const float* k = x.data() + hd + h * dh;
    const float* v = x.data() + 2 * hd + h * dh;
    const auto score = [&](const float* key, int64_t distance) {
      float acc = 0.0f;
      for (int i = 0; i < half; ++i) {
        const double inv_freq = std::pow(10000.0, -2.0 * static_cast<double>(i) / c.rotary_dim);
        const double angle = static_cast<double>(distance) * inv_freq;
        const float co = static_cast<float>(std::cos(angle));
        const float si = static_cast<float>(std::sin(angle));
        const int j = i + half;
        acc += q[i] * (key[i] * co + key[j] * si);
        acc += q[j] * (key[j] * co - key[i] * si);
      }
      for (int i = 2 * half; i < dh; ++i) acc += q[i] * key[i];
      return acc * scale;
    };
    const int64_t oldest = ring == 0 ? 0 : (next - count + ring) % ring;
    std::vector<const float*> keys;  // k, then v at + dh
    std::vector<float> scores;
    for (int64_t j = 0; j < count; ++j) {
      keys.push_back(slice + ((oldest + j) % ring) * entry_floats + h * 2 * dh);
      scores.push_back(score(keys.back(), count - j));
    }
    scores.push_back(score(k, 0));
    const float max = *std::max_element(scores.begin(), scores.end());
    float sum = 0.0f;
    for (float& s : scores) {
      s = std::exp(s - max);
      sum += s;
    }
    float* o = out + h * dh;
    std::fill(o, o + dh, 0.0f);
    for (size_t j = 0; j < scores.size(); ++j) {
      const float* value = j < keys.size() ? keys[j] + dh : v;
      for (int i = 0; i < dh; ++i) o[i] += scores[j] * value[i];
    }
    for (int i = 0; i < dh; ++i) o[i] *= 1.0f / sum;
  }
  if (ring == 0) return;
  for (int h = 0; h < c.heads; ++h) {
    float* entry = slice + next * entry_floats + h * 2 * dh;
    std::copy(x.begin() + hd + h * dh, x.begin() + hd + (h + 1) * dh, entry);
    std::copy(x.begin() + 2 * hd + h * dh, x.begin() + 2 * hd + (h + 1) * dh, entry + dh);
  }
  counters[0] = static_cast<float>(std::min(count + 1, ring));
  counters[1] = static_cast<float>((next + 1) % ring);
}

// A slice after `tokens` random tokens from the zero state.
std::vector<float> WindowHistory(const WindowCase& c, const std::vector<float>& bias, int tokens,
                                 uint64_t seed) {
  const int64_t hd = static_cast<int64_t>(c.heads) * c.head_dim;
  std::vector<float> slice(static_cast<size_t>(WindowSliceFloats(c)), 0.0f);
  std::vector<float> out(static_cast<size_t>(hd));
  const std::vector<float> qkv = RandomFloats(static_cast<size_t>(tokens * 3 * hd), seed, 0.7f);
  for (int t = 0; t < tokens; ++t) {
    WindowReferenceStep(c, qkv.data() + t * 3 * hd, bias, slice.data(), out.data());
  }
  return slice;
}

// The decode step over a batch of slots holding 3 tokens, none, 1, window + 1 (the ring
// wrapped) and 2·window + 3, in a scattered order with a padding row (slot -1): the outputs
// against the CPU's step, the states bitwise (the ring stores copies, the counters integers).
TEST(CudaKernelsTest, SlidingWindowDecodeMatchesCpuStep) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const WindowCase& c : kWindowCases) {
    SCOPED_TRACE(c.name);
    const int64_t hd = static_cast<int64_t>(c.heads) * c.head_dim;
    const int64_t slice_floats = WindowSliceFloats(c);
    const int layers = 2, layer = 1;
    const int64_t slot_floats = layers * slice_floats;
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(3 * hd), 30, 0.2f);
    const std::vector<int> history = {3, 0, 1, c.window + 1, 2 * c.window + 3};
    std::vector<float> states = RandomFloats(history.size() * slot_floats, 31);  // layer 0: noise
    for (size_t s = 0; s < history.size(); ++s) {
      const std::vector<float> slice = WindowHistory(c, bias, history[s], 32 + s);
      std::copy(slice.begin(), slice.end(),
                states.begin() + s * slot_floats + layer * slice_floats);
    }
    const std::vector<int32_t> slot_of_row = {3, 1, 4, -1, 0, 2};
    const int rows = static_cast<int>(slot_of_row.size());
    const std::vector<float> qkv = RandomFloats(static_cast<size_t>(rows * 3 * hd), 37, 0.7f);

    std::vector<float> expect_states = states;
    std::vector<float> expect_out(static_cast<size_t>(rows * hd), 0.0f);
    for (int r = 0; r < rows; ++r) {
      if (slot_of_row[r] < 0) continue;  // the padding row's output is unspecified
      WindowReferenceStep(c, qkv.data() + r * 3 * hd, bias,
                          expect_states.data() + slot_of_row[r] * slot_floats +
                              layer * slice_floats,
                          expect_out.data() + r * hd);
    }
    for (DType dtype : kTypes) {
      SCOPED_TRACE(cuda::DTypeName(dtype));
      DeviceArray<float> qkv_dev(qkv), bias_dev(bias), state(states);
      DeviceArray<int32_t> slot_dev(slot_of_row);
      DeviceArray<float> rotation = RotationTable(WindowShape(c));
      DeviceArray<uint8_t> out(static_cast<size_t>(rows * hd) * cuda::DTypeSize(dtype));
      cuda::SlidingWindowDecodeArgs args;
      args.shape = WindowShape(c);
      args.qkv = qkv_dev.get();
      args.qkv_bias = c.bias ? bias_dev.get() : nullptr;
      args.slots = slot_dev.get();
      args.rotation = rotation.get();
      args.state = state.get();
      args.slot_stride = slot_floats;
      args.layer_offset = layer * slice_floats;
      args.rows = rows;
      args.out_dtype = dtype;
      args.out = out.get();
      if (c.rotary_dim > 0) {  // without the table a rotary shape is refused, nothing written
        cuda::SlidingWindowDecodeArgs no_table = args;
        no_table.rotation = nullptr;
        EXPECT_EQ(cuda::LaunchSlidingWindowDecode(nullptr, no_table).code(),
                  absl::StatusCode::kInvalidArgument);
      }
      ASSERT_TRUE(cuda::LaunchSlidingWindowDecode(nullptr, args).ok());
      std::vector<float> got = ToFloats(out, dtype, static_cast<size_t>(rows * hd));
      std::vector<float> expect_t = expect_out;
      for (int r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < hd; ++i) {
          float& e = expect_t[static_cast<size_t>(r * hd + i)];
          e = slot_of_row[r] < 0 ? got[static_cast<size_t>(r * hd + i)] : Round(dtype, e);
        }
      }
      EXPECT_LE(RelativeError(got, expect_t), dtype == DType::kF32 ? kFp32Tolerance : 1e-2);
      EXPECT_EQ(state.Download(), expect_states);
    }
  }
}

// Prefill of 1, 3 and 70 tokens from an empty ring and from a wrapped one against feeding them
// one by one through the CPU's step: the outputs, and the slice bitwise.
TEST(CudaKernelsTest, SlidingWindowPrefillMatchesTokenByToken) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  for (const WindowCase& c : kWindowCases) {
    SCOPED_TRACE(c.name);
    const int64_t hd = static_cast<int64_t>(c.heads) * c.head_dim;
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(3 * hd), 40, 0.2f);
    for (int history : {0, 2 * c.window + 3}) {
      for (int tokens : {1, 3, 70}) {
        SCOPED_TRACE(testing::Message() << "history " << history << ", tokens " << tokens);
        const std::vector<float> initial = WindowHistory(c, bias, history, 41);
        const std::vector<float> qkv =
            RandomFloats(static_cast<size_t>(tokens * 3 * hd), 42 + tokens, 0.7f);
        std::vector<float> expect_slice = initial;
        std::vector<float> expect_out(static_cast<size_t>(tokens * hd));
        for (int t = 0; t < tokens; ++t) {
          WindowReferenceStep(c, qkv.data() + t * 3 * hd, bias, expect_slice.data(),
                              expect_out.data() + t * hd);
        }
        DeviceArray<float> qkv_dev(qkv), bias_dev(bias), slice(initial);
        DeviceArray<float> rotation = RotationTable(WindowShape(c));
        DeviceArray<uint8_t> out(static_cast<size_t>(tokens * hd) * sizeof(float));
        const DeviceTables tables(OnePiece(tokens, 64));
        cuda::SlidingWindowPrefillArgs args;
        args.shape = WindowShape(c);
        args.qkv = qkv_dev.get();
        args.qkv_bias = c.bias ? bias_dev.get() : nullptr;
        args.tables = tables.tables;
        args.state = slice.get();
        args.rotation = rotation.get();
        args.out_dtype = DType::kF32;
        args.out = out.get();
        ASSERT_TRUE(cuda::LaunchSlidingWindowPrefill(nullptr, args).ok());
        EXPECT_LE(RelativeError(ToFloats(out, DType::kF32, expect_out.size()), expect_out),
                  kFp32Tolerance);
        EXPECT_EQ(slice.Download(), expect_slice);
      }
    }
  }
}

// Varlen: the pieces of a pass (1, 3 and 70 rows, of slots out of order, from an empty ring, a
// wrapped one and a short one) in one launch sequence give bitwise the outputs and slices of
// each piece launched alone.
TEST(CudaKernelsTest, SlidingWindowPrefillVarlenEqualsEachPieceAlone) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<int> rows = {1, 3, 70};
  const std::vector<int32_t> slots = {1, 2, 0};
  const int total = 74;
  for (const WindowCase& c : kWindowCases) {
    SCOPED_TRACE(c.name);
    const int64_t hd = static_cast<int64_t>(c.heads) * c.head_dim;
    const int64_t slice = WindowSliceFloats(c);
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(3 * hd), 80, 0.2f);
    std::vector<float> initial;
    for (int history : {0, 2 * c.window + 3, 1}) {
      const std::vector<float> one = WindowHistory(c, bias, history, 81 + history);
      initial.insert(initial.end(), one.begin(), one.end());
    }
    const std::vector<float> qkv = RandomFloats(static_cast<size_t>(total * 3 * hd), 82, 0.7f);
    DeviceArray<float> qkv_dev(qkv), bias_dev(bias), together(initial), alone(initial);
    DeviceArray<float> rotation = RotationTable(WindowShape(c));
    const size_t out_bytes = static_cast<size_t>(total * hd) * sizeof(float);
    DeviceArray<uint8_t> out_together(out_bytes), out_alone(out_bytes);
    cuda::SlidingWindowPrefillArgs args;
    args.shape = WindowShape(c);
    args.qkv_bias = c.bias ? bias_dev.get() : nullptr;
    args.slot_stride = slice;
    args.rotation = rotation.get();
    args.out_dtype = DType::kF32;
    LaunchTogetherThenAlone<cuda::SlidingWindowPrefillArgs>(
        args, rows, slots, 64,
        [&](cuda::SlidingWindowPrefillArgs& x, size_t first, const cuda::PrefillTables& tables,
            bool both) {
          x.qkv = qkv_dev.get() + first * 3 * hd;
          x.tables = tables;
          x.state = (both ? together : alone).get();
          x.out = (both ? out_together : out_alone).get() +
                  first * static_cast<size_t>(hd) * sizeof(float);
        },
        [](const cuda::SlidingWindowPrefillArgs& x) {
          return cuda::LaunchSlidingWindowPrefill(nullptr, x);
        });
    EXPECT_EQ(out_together.Download(), out_alone.Download());
    EXPECT_EQ(together.Download(), alone.Download());
  }
}

TEST(CudaKernelsTest, SlidingWindowRejectsShapesOutOfRange) {
  cuda::SlidingWindowShape shape = WindowShape(kWindowCases[0]);
  EXPECT_TRUE(cuda::CheckSlidingWindowShape(shape).ok());
  shape.head_dim = cuda::kMaxSlidingWindowHeadDim + 1;
  shape.rotary_dim = 8;
  EXPECT_THAT(cuda::CheckSlidingWindowShape(shape).message(), testing::HasSubstr("head_dim 4097"));
  shape.head_dim = 8;
  shape.rotary_dim = 7;
  EXPECT_THAT(cuda::CheckSlidingWindowShape(shape).message(), testing::HasSubstr("rotary_dim 7"));
  shape.rotary_dim = 8;
  shape.window = 0;
  EXPECT_THAT(cuda::CheckSlidingWindowShape(shape).message(), testing::HasSubstr("window 0"));
}

// A token mask over `vocab` tokens for a step's row (masked-row tests): a random third of the
// vocabulary, one token, or the upper half of the ids; the bits past the vocabulary set
// (they mean nothing).
std::vector<uint32_t> RowMask(int vocab, int kind, std::mt19937_64& rng) {
  const int words = (vocab + 31) / 32;
  std::vector<uint32_t> mask(static_cast<size_t>(words), 0);
  auto allow = [&mask](int t) { mask[t / 32] |= uint32_t{1} << (t % 32); };
  switch (kind % 3) {
    case 0:
      for (int t = 0; t < vocab; ++t) {
        if (rng() % 3 == 0) allow(t);
      }
      break;
    case 1:
      allow(static_cast<int>(rng() % static_cast<uint64_t>(vocab)));
      break;
    default:
      for (int t = vocab / 2; t < vocab; ++t) allow(t);
      break;
  }
  for (int t = vocab; t < words * 32; ++t) allow(t);
  return mask;
}

// Which path the device takes for an unpenalised sampled row, by sampling.h's rule (one-token
// masks take the set at any scale): more than
// kSampleCandidates tokens within kSampleCandidateSpan of the maximum (the whole row), a set
// that no filter closes (plain sampling, or top_k beyond it: the whole row), or the candidate
// set (counted when a top-k, min-p or top-p may close it; top-p reaches its mass inside the set
// for these rows, whose tail beyond the span weighs under 1e-3).
enum SamplePath { kCandidateSet, kOverflow, kOpen };
SamplePath ExpectedPath(absl::Span<const float> logits, const SamplingParams& p,
                        const uint32_t* mask) {
  auto allowed = [&](int t) { return mask == nullptr || ((mask[t / 32] >> (t % 32)) & 1u) != 0; };
  double m = -std::numeric_limits<double>::infinity();
  int n_allowed = 0;
  for (int t = 0; t < static_cast<int>(logits.size()); ++t) {
    if (!allowed(t)) continue;
    ++n_allowed;
    m = std::max(m, static_cast<double>(logits[t]) / p.temperature);
  }
  int found = 0;
  for (int t = 0; t < static_cast<int>(logits.size()); ++t) {
    const double l = static_cast<double>(logits[t]) / p.temperature;
    if (allowed(t) && l >= m - cuda::kSampleCandidateSpan) ++found;
  }
  if (found > cuda::kSampleCandidates) return kOverflow;
  if (found == n_allowed) return kCandidateSet;
  if (p.top_k > 0 && p.top_k < n_allowed) return p.top_k <= found ? kCandidateSet : kOpen;
  return p.min_p > 0.0f || p.top_p < 1.0f ? kCandidateSet : kOpen;
}

// The device sampler against the host Sampler: the same logits and seed give the same tokens,
// step after step (so the random streams and the seen-token counts advance alike), over every
// filter and penalty, including logits with many exact ties around the top-k and top-p cuts,
// and with logit biases on a quarter of the rows.
// With `masked`, two rows in three sample under a token mask that changes every step (the host
// Sampler gets the same mask) and the others under none. `scale` is the logits' spread: at 2.5
// every sampled row has more than kSampleCandidates tokens within kSampleCandidateSpan of its
// maximum (the whole-row path) unless its mask allows few; at 12 most have a few dozen to a few
// hundred (the candidate set, or the whole row when no filter closes the set or top-k reaches
// past it). The unpenalised rows' paths are counted on the host from the documented rule and
// must include each one the scale is meant to force.
void CheckSamplerMatchesHost(bool masked, float scale = 2.5f) {
  std::vector<SamplingParams> settings;
  auto add = [&](float temperature, int top_k, float top_p, float min_p, float repetition,
                 float presence, float frequency) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.repetition_penalty = repetition;
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    p.seed = 1000 + settings.size();
    settings.push_back(p);
  };
  add(0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);     // greedy
  add(0.0f, 0, 1.0f, 0.0f, 1.5f, 0.5f, 0.25f);    // greedy with penalties
  add(1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);     // plain sampling
  add(0.7f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);    // top-k
  add(1.3f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f);     // top-p
  add(1.0f, 0, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f);     // min-p
  add(0.8f, 50, 0.95f, 0.02f, 1.2f, 0.3f, 0.1f);  // everything
  add(2.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);     // top-k 1
  add(1.0f, 0, 0.05f, 0.0f, 0.8f, -0.5f, -0.2f);  // tiny top-p, negative penalties
  const int vocab = 5003;
  const int rows = static_cast<int>(settings.size()) * 2;
  const int steps = 12;

  std::vector<cuda::DeviceSamplingParams> params(rows);
  std::vector<Sampler> host;
  std::vector<cuda::Mt19937_64> rngs(rows);
  std::vector<int32_t> counts(static_cast<size_t>(rows) * vocab, 0);
  const int64_t bias_entries = cuda::LogitBiasEntries(vocab);
  const int words = (vocab + 31) / 32;
  std::vector<int32_t> biases(static_cast<size_t>(rows * bias_entries), 0);
  std::vector<int32_t> slots(rows);
  for (int r = 0; r < rows; ++r) {
    SamplingParams p = settings[r % settings.size()];
    p.seed += 100 * (r / settings.size());
    slots[r] = rows - 1 - r;  // rows address slots in reverse
    // The second copy's odd rows carry logit biases: 80 tokens, ascending in the device layout,
    // biases of both signs and one ban, on the prompt's (penalised) tokens too.
    if (r >= static_cast<int>(settings.size()) && r % 2 == 1) {
      std::set<TokenId> tokens;
      std::mt19937_64 pick(500 + r);
      while (tokens.size() < 80) tokens.insert(static_cast<TokenId>(pick() % vocab));
      int i = 0;
      for (TokenId t : tokens) {
        const float bias = i == 5 ? -100.0f : 0.75f * static_cast<float>(i % 13 - 6);
        p.logit_bias.push_back({t, bias});
        int32_t* slot_biases = biases.data() + slots[r] * bias_entries;
        slot_biases[t / 32] |= static_cast<int32_t>(uint32_t{1} << (t % 32));
        slot_biases[words + i] = t;
        slot_biases[words + cuda::kMaxDeviceLogitBias + i] = absl::bit_cast<int32_t>(bias);
        ++i;
      }
    }
    host.emplace_back(p);
    params[r] = {p.temperature,
                 p.top_k,
                 p.top_p,
                 p.min_p,
                 p.repetition_penalty,
                 p.presence_penalty,
                 p.frequency_penalty,
                 static_cast<int32_t>(p.logit_bias.size())};
    rngs[r].Seed(p.seed);
    // A prompt for the penalties.
    const std::vector<int32_t> prompt = gpu_test::RandomTokens(30, vocab, 30 + r);
    host.back().Observe(prompt);
    for (int32_t t : prompt) ++counts[static_cast<size_t>(slots[r]) * vocab + t];
  }
  std::vector<cuda::DeviceSamplingParams> params_by_slot(rows);
  std::vector<cuda::Mt19937_64> rngs_by_slot(rows);
  for (int r = 0; r < rows; ++r) {
    params_by_slot[slots[r]] = params[r];
    rngs_by_slot[slots[r]] = rngs[r];
  }
  DeviceArray<cuda::DeviceSamplingParams> params_dev(params_by_slot);
  DeviceArray<cuda::Mt19937_64> rngs_dev(rngs_by_slot);
  DeviceArray<int32_t> counts_dev(counts), slots_dev(slots), tokens_dev(rows), biases_dev(biases);

  std::mt19937_64 rng(99);
  std::vector<int> paths(3, 0);  // by SamplePath, unpenalised sampled rows
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(step);
    std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 40 + step, scale);
    if (step % 3 == 1) {
      // Quantised logits: many exact ties, also at the top.
      for (float& l : logits) l = std::round(l * 2.0f) / 2.0f;
    }
    // The masked rows' masks, packed, and each row's index into them.
    std::vector<std::vector<uint32_t>> masks(rows);
    std::vector<uint32_t> packed;
    std::vector<int32_t> index(rows, -1);
    for (int r = 0; masked && r < rows; ++r) {
      if (r % 3 == 2) continue;
      masks[r] = RowMask(vocab, r + step, rng);
      index[r] = static_cast<int32_t>(packed.size()) / words;
      packed.insert(packed.end(), masks[r].begin(), masks[r].end());
    }
    DeviceArray<float> logits_dev(logits);
    DeviceArray<uint32_t> packed_dev(packed.empty() ? std::vector<uint32_t>(1) : packed);
    DeviceArray<int32_t> index_dev(index);
    cuda::SampleArgs args;
    args.logits = logits_dev.get();
    args.slots = slots_dev.get();
    args.state = {params_dev.get(), counts_dev.get(), rngs_dev.get(), biases_dev.get()};
    if (masked) args.masks = {packed_dev.get(), index_dev.get(), words};
    args.rows = rows;
    args.vocab = vocab;
    args.tokens = tokens_dev.get();
    ASSERT_TRUE(cuda::LaunchSample(nullptr, args).ok());
    const std::vector<int32_t> got = tokens_dev.Download();
    for (int r = 0; r < rows; ++r) {
      const uint32_t* mask = masks[r].empty() ? nullptr : masks[r].data();
      const SamplingParams& p = host[r].params();
      if (p.temperature > 0.0f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
          p.frequency_penalty == 0.0f && p.logit_bias.empty()) {
        ++paths[static_cast<size_t>(ExpectedPath(
            absl::MakeConstSpan(logits).subspan(static_cast<size_t>(r) * vocab, vocab), p, mask))];
      }
      const TokenId expect = host[r].Sample(
          absl::MakeConstSpan(logits).subspan(static_cast<size_t>(r) * vocab, vocab), mask);
      EXPECT_EQ(got[r], expect) << "row " << r << " params " << r % settings.size();
      if (mask != nullptr) {
        EXPECT_TRUE((mask[got[r] / 32] >> (got[r] % 32)) & 1u) << "row " << r;
      }
    }
  }
  // The device counted every sampled token on top of the prompt.
  const std::vector<int32_t> final_counts = counts_dev.Download();
  int64_t total = 0;
  for (int32_t c : final_counts) total += c;
  EXPECT_EQ(total, static_cast<int64_t>(rows) * (30 + steps));
  if (scale < 5.0f) {
    EXPECT_GT(paths[kOverflow], 0);
  } else {
    EXPECT_GT(paths[kCandidateSet], 20);
    EXPECT_GT(paths[kOpen], 0);
  }
}

TEST(CudaKernelsTest, SamplerMatchesHostSampler) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  CheckSamplerMatchesHost(/*masked=*/false);
}

// Peaked rows: the sampled rows take the candidate set (or the whole row when no filter closes
// it), with and without token masks.
TEST(CudaKernelsTest, SamplerMatchesHostSamplerOnTheCandidateSet) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  CheckSamplerMatchesHost(/*masked=*/false, /*scale=*/12.0f);
  CheckSamplerMatchesHost(/*masked=*/true, /*scale=*/12.0f);
}

// Token masks: greedy, temperature with every filter and penalty, one-token masks, masks on
// some rows only; the picks stay in the mask and equal the host's.
TEST(CudaKernelsTest, SamplerMatchesHostSamplerUnderTokenMasks) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  CheckSamplerMatchesHost(/*masked=*/true);
}

// The greedy rows' one-pass argmax against the host Sampler's step 2, on the rows that decide a
// tie-break: exact ties at the top (lowest id wins), +0 against -0, the maximum on the last
// token, every allowed logit -inf (the lowest allowed id), NaN on the first allowed token (the
// host never replaces it) and elsewhere (never picked), masks, and penalties that move the
// maximum; with one block per row and with rows split over 2 to kMaxArgmaxSplits blocks. Only
// the argmax kernel runs (any_sampled false): a sampled row in the batch is left alone, its
// token and counts untouched.
TEST(CudaKernelsTest, ArgmaxMatchesHostGreedyOnEveryTieBreak) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 2053;
  constexpr int kWords = (kVocab + 31) / 32;
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  enum Case { kRandom, kTiesAtTop, kZeros, kLast, kAllMinusInf, kNanFirst, kNanElsewhere, kCases };
  // Every case with and without penalties, with and without a mask, and one sampled row.
  const int rows = 2 * 2 * kCases + 1;
  const int sampled = rows - 1;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * kVocab, 7, 2.0f);
  std::vector<std::vector<uint32_t>> masks(rows);
  std::vector<uint32_t> packed;
  std::vector<int32_t> index(rows, -1);
  std::vector<cuda::DeviceSamplingParams> params(rows);
  std::vector<int32_t> counts(static_cast<size_t>(rows) * kVocab, 0);
  std::vector<int32_t> slots(rows);
  std::vector<Sampler> host;
  std::mt19937_64 rng(5);
  for (int r = 0; r < rows; ++r) {
    slots[r] = (r * 7) % rows;  // a permutation: rows address slots out of order
    const int c = r % kCases;
    const bool penalised = (r / kCases) % 2 == 1;
    const bool masked = (r / (2 * kCases)) % 2 == 1;
    SamplingParams p;
    p.temperature = r == sampled ? 1.0f : 0.0f;
    if (penalised) {
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.4f;
      p.frequency_penalty = 0.2f;
    }
    p.seed = 17 + r;
    float* row = logits.data() + static_cast<size_t>(r) * kVocab;
    std::vector<uint32_t> mask;
    if (masked) {
      mask = RowMask(kVocab, r, rng);
      // Some allowed tokens for the cases below: the first, two in the middle, the last.
      for (int t : {0, 700, 701, kVocab - 1}) mask[t / 32] |= uint32_t{1} << (t % 32);
    }
    auto allowed = [&](int t) { return mask.empty() || ((mask[t / 32] >> (t % 32)) & 1u) != 0; };
    int first_allowed = 0;
    while (!allowed(first_allowed)) ++first_allowed;
    switch (c) {
      case kTiesAtTop:
        for (int t = 0; t < kVocab; ++t) row[t] = std::round(row[t]);
        row[700] = row[701] = row[kVocab - 1] = 9.0f;
        break;
      case kZeros:
        for (int t = 0; t < kVocab; ++t) row[t] = -std::abs(row[t]) - 1.0f;
        row[701] = -0.0f;
        row[kVocab - 1] = 0.0f;
        break;
      case kLast:
        row[kVocab - 1] = 50.0f;
        break;
      case kAllMinusInf:
        for (int t = 0; t < kVocab; ++t) row[t] = -kInf;
        break;
      case kNanFirst:
        row[first_allowed] = kNan;
        break;
      case kNanElsewhere:
        row[700] = kNan;
        row[kVocab - 1] = kNan;
        break;
      default:
        break;
    }
    host.emplace_back(p);
    params[slots[r]] = {p.temperature,        p.top_k,           p.top_p,
                        p.min_p,              p.repetition_penalty, p.presence_penalty,
                        p.frequency_penalty};
    // A prompt with the maxima among the seen tokens, so that penalties move the pick.
    std::vector<int32_t> prompt = gpu_test::RandomTokens(40, kVocab, 60 + r);
    prompt.push_back(700);
    prompt.push_back(kVocab - 1);
    host.back().Observe(prompt);
    for (int32_t t : prompt) ++counts[static_cast<size_t>(slots[r]) * kVocab + t];
    if (!mask.empty()) {
      index[r] = static_cast<int32_t>(packed.size()) / kWords;
      packed.insert(packed.end(), mask.begin(), mask.end());
    }
    masks[r] = std::move(mask);
  }
  DeviceArray<float> logits_dev(logits);
  DeviceArray<uint32_t> packed_dev(packed);
  DeviceArray<int32_t> index_dev(index), slots_dev(slots);
  DeviceArray<cuda::DeviceSamplingParams> params_dev(params);
  DeviceArray<cuda::Mt19937_64> rngs_dev(rows);
  DeviceArray<cuda::ArgmaxPartial> partials(cuda::kArgmaxSplitRows * cuda::kMaxArgmaxSplits);
  const std::vector<uint32_t> no_arrivals(cuda::kArgmaxSplitRows, 0);
  DeviceArray<uint32_t> arrivals(no_arrivals);
  // One block per row, and rows split in segments: 2 (the tie between 700 and the last token
  // crosses them), 3 (ArgmaxSplits' choice here), kMaxArgmaxSplits (65 ids each: many segments
  // without an allowed or a non-NaN token).
  ASSERT_EQ(cuda::ArgmaxSplits(rows, kVocab), 3);
  for (int splits : {1, 2, 3, cuda::kMaxArgmaxSplits}) {
    SCOPED_TRACE(testing::Message() << splits << " blocks per row");
    DeviceArray<int32_t> counts_dev(counts);
    DeviceArray<int32_t> tokens_dev(std::vector<int32_t>(rows, -7));
    cuda::SampleArgs args;
    args.logits = logits_dev.get();
    args.slots = slots_dev.get();
    args.state = {params_dev.get(), counts_dev.get(), rngs_dev.get()};
    args.masks = {packed_dev.get(), index_dev.get(), kWords};
    args.rows = rows;
    args.vocab = kVocab;
    args.tokens = tokens_dev.get();
    args.any_sampled = false;
    args.argmax_splits = splits;
    args.argmax = {partials.get(), arrivals.get()};
    ASSERT_TRUE(cuda::LaunchSample(nullptr, args).ok());
    const std::vector<int32_t> got = tokens_dev.Download();
    const std::vector<int32_t> got_counts = counts_dev.Download();
    EXPECT_EQ(arrivals.Download(), no_arrivals) << "the counters are left at zero";
    for (int r = 0; r < rows; ++r) {
      const size_t at = static_cast<size_t>(slots[r]) * kVocab;
      if (r == sampled) {
        EXPECT_EQ(got[r], -7) << "the sampled row is SampleKernel's";
        EXPECT_TRUE(std::equal(got_counts.begin() + at, got_counts.begin() + at + kVocab,
                               counts.begin() + at));
        continue;
      }
      const uint32_t* mask = masks[r].empty() ? nullptr : masks[r].data();
      Sampler sampler = host[r];
      const TokenId expect = sampler.Sample(
          absl::MakeConstSpan(logits).subspan(static_cast<size_t>(r) * kVocab, kVocab), mask);
      EXPECT_EQ(got[r], expect) << "row " << r << " case " << r % kCases;
      ASSERT_GE(got[r], 0);
      EXPECT_EQ(got_counts[at + got[r]], counts[at + got[r]] + 1) << "row " << r;
    }
  }
  // Splitting needs the scratch, and at most kArgmaxSplitRows rows.
  cuda::SampleArgs bad;
  bad.logits = logits_dev.get();
  bad.slots = slots_dev.get();
  bad.rows = rows;
  bad.vocab = kVocab;
  bad.argmax_splits = 2;
  EXPECT_EQ(cuda::LaunchSample(nullptr, bad).code(), absl::StatusCode::kInvalidArgument);
  bad.argmax = {partials.get(), arrivals.get()};
  bad.argmax_splits = cuda::kMaxArgmaxSplits + 1;
  EXPECT_EQ(cuda::LaunchSample(nullptr, bad).code(), absl::StatusCode::kInvalidArgument);
  bad.argmax_splits = 2;
  bad.rows = cuda::kArgmaxSplitRows + 1;
  EXPECT_EQ(cuda::LaunchSample(nullptr, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::ArgmaxSplits(1, 50304), cuda::kMaxArgmaxSplits);
  EXPECT_EQ(cuda::ArgmaxSplits(64, 50304), 4);
  EXPECT_EQ(cuda::ArgmaxSplits(cuda::kArgmaxSplitRows + 1, 50304), 1);
}

// The device's logprobs equal the host's LogProbOf / TopLogprobsInto: the same alternatives in
// the same order (ties to the lowest id: the logits here are rounded so that many tie), values
// within float rounding; rows asking for none are left alone.
TEST(CudaKernelsTest, TopLogprobsMatchTheHost) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 3001;
  constexpr int kMaxTop = 20;
  const std::vector<int32_t> top_n = {5, 0, kMaxTop, 1};
  const int rows = static_cast<int>(top_n.size());
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * kVocab, 41, 4.0f);
  for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;
  const std::vector<int32_t> tokens = {7, 8, 2999, 0};
  DeviceArray<float> logits_dev(logits);
  DeviceArray<int32_t> tokens_dev(tokens), top_n_dev(top_n);
  const float kUntouched = -12345.0f;
  DeviceArray<float> logprobs(std::vector<float>(rows, kUntouched));
  DeviceArray<int32_t> top_ids(std::vector<int32_t>(rows * kMaxTop, -1));
  DeviceArray<float> top_values(std::vector<float>(rows * kMaxTop, kUntouched));
  cuda::TopLogprobsArgs args;
  args.logits = logits_dev.get();
  args.tokens = tokens_dev.get();
  args.top_n = top_n_dev.get();
  args.rows = rows;
  args.vocab = kVocab;
  args.max_top = kMaxTop;
  args.logprobs = logprobs.get();
  args.top_ids = top_ids.get();
  args.top_logprobs = top_values.get();
  ASSERT_TRUE(cuda::LaunchTopLogprobs(nullptr, args).ok());
  const std::vector<float> got_logprobs = logprobs.Download();
  const std::vector<int32_t> got_ids = top_ids.Download();
  const std::vector<float> got_values = top_values.Download();
  std::vector<int32_t> scratch;
  for (int r = 0; r < rows; ++r) {
    const absl::Span<const float> row(logits.data() + static_cast<size_t>(r) * kVocab, kVocab);
    if (top_n[r] == 0) {
      EXPECT_EQ(got_logprobs[r], kUntouched);
      EXPECT_EQ(got_ids[r * kMaxTop], -1);
      continue;
    }
    EXPECT_FLOAT_EQ(got_logprobs[r], LogProbOf(row, tokens[r])) << "row " << r;
    std::vector<TokenLogprob> expected(kMaxTop);
    TopLogprobsInto(row, top_n[r], nullptr, scratch, expected.data());
    for (int k = 0; k < top_n[r]; ++k) {
      EXPECT_EQ(got_ids[r * kMaxTop + k], expected[k].token) << "row " << r << " k " << k;
      EXPECT_FLOAT_EQ(got_values[r * kMaxTop + k], expected[k].logprob)
          << "row " << r << " k " << k;
    }
    for (int k = top_n[r]; k < kMaxTop; ++k) EXPECT_EQ(got_ids[r * kMaxTop + k], -1);
  }
}

// Under token masks the device's logprobs are the host's of the masked distribution: a row
// allowing a third of the vocabulary, one allowing 3 tokens but asking for 20 alternatives (the
// rest are the lowest disallowed ids at -inf), and an unmasked row beside them.
TEST(CudaKernelsTest, TopLogprobsMatchTheHostUnderTokenMasks) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 3001;
  constexpr int kMaxTop = 20;
  constexpr int kWords = (kVocab + 31) / 32;
  const std::vector<int32_t> top_n = {6, kMaxTop, 4};
  const int rows = static_cast<int>(top_n.size());
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * kVocab, 43, 4.0f);
  for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;
  std::mt19937_64 rng(5);
  std::vector<uint32_t> wide = RowMask(kVocab, 0, rng);
  std::vector<uint32_t> three(kWords, 0);
  for (int t : {17, 1500, 2999}) three[t / 32] |= uint32_t{1} << (t % 32);
  // Each row's sampled token: row 0's last allowed one, an allowed one, any one (no mask).
  std::vector<int32_t> tokens = {0, 1500, 5};
  for (int t = 0; t < kVocab; ++t) {
    if ((wide[t / 32] >> (t % 32)) & 1u) tokens[0] = t;
  }
  std::vector<uint32_t> packed = wide;
  packed.insert(packed.end(), three.begin(), three.end());
  const std::vector<int32_t> index = {0, 1, -1};
  DeviceArray<float> logits_dev(logits);
  DeviceArray<int32_t> tokens_dev(tokens), top_n_dev(top_n), index_dev(index);
  DeviceArray<uint32_t> packed_dev(packed);
  DeviceArray<float> logprobs(static_cast<size_t>(rows));
  DeviceArray<int32_t> top_ids(static_cast<size_t>(rows * kMaxTop));
  DeviceArray<float> top_values(static_cast<size_t>(rows * kMaxTop));
  cuda::TopLogprobsArgs args;
  args.logits = logits_dev.get();
  args.tokens = tokens_dev.get();
  args.top_n = top_n_dev.get();
  args.rows = rows;
  args.vocab = kVocab;
  args.max_top = kMaxTop;
  args.masks = {packed_dev.get(), index_dev.get(), kWords};
  args.logprobs = logprobs.get();
  args.top_ids = top_ids.get();
  args.top_logprobs = top_values.get();
  ASSERT_TRUE(cuda::LaunchTopLogprobs(nullptr, args).ok());
  const std::vector<float> got_logprobs = logprobs.Download();
  const std::vector<int32_t> got_ids = top_ids.Download();
  const std::vector<float> got_values = top_values.Download();
  const uint32_t* masks[] = {wide.data(), three.data(), nullptr};
  std::vector<int32_t> scratch;
  for (int r = 0; r < rows; ++r) {
    const absl::Span<const float> row(logits.data() + static_cast<size_t>(r) * kVocab, kVocab);
    EXPECT_FLOAT_EQ(got_logprobs[r], LogProbOf(row, tokens[r], masks[r])) << "row " << r;
    std::vector<TokenLogprob> expected(kMaxTop);
    TopLogprobsInto(row, top_n[r], masks[r], scratch, expected.data());
    for (int k = 0; k < top_n[r]; ++k) {
      EXPECT_EQ(got_ids[r * kMaxTop + k], expected[k].token) << "row " << r << " k " << k;
      EXPECT_FLOAT_EQ(got_values[r * kMaxTop + k], expected[k].logprob)
          << "row " << r << " k " << k;
    }
  }
  // Row 1: its three allowed tokens, then 0, 1, 2, ... at -inf.
  EXPECT_EQ(got_values[kMaxTop + 3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(got_ids[kMaxTop + 3], 0);
  EXPECT_GT(got_values[kMaxTop + 2], -std::numeric_limits<float>::infinity());
}

// Padded logits rows (the CUDA backend's LM head output, model/backend/cuda/padded_vocab.h): with
// logits_stride > vocab the sampler and the logprobs read only the first vocab columns of each
// row. The pad columns hold 1e30, which would win every argmax, swamp every softmax and be drawn
// by every sampled row if either kernel read them; the picks and logprobs must equal the host's
// over the dense rows.
TEST(CudaKernelsTest, SamplerAndLogprobsReadOnlyTheVocabColumnsOfPaddedRows) {
  LINSERVE_SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int kVocab = 301;
  constexpr int kStride = 320;
  constexpr int kMaxTop = 5;
  std::vector<SamplingParams> settings(3);
  settings[0].temperature = 0.0f;  // greedy
  settings[1].temperature = 1.0f;
  settings[1].seed = 7;
  settings[2].temperature = 0.8f;
  settings[2].top_k = 40;
  settings[2].top_p = 0.9f;
  settings[2].seed = 8;
  const int rows = static_cast<int>(settings.size());
  std::vector<cuda::DeviceSamplingParams> params;
  std::vector<cuda::Mt19937_64> rngs(rows);
  std::vector<Sampler> host;
  std::vector<int32_t> slots;
  for (int r = 0; r < rows; ++r) {
    const SamplingParams& p = settings[r];
    params.push_back({p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty,
                      p.presence_penalty, p.frequency_penalty});
    rngs[r].Seed(p.seed);
    host.emplace_back(p);
    slots.push_back(r);
  }
  DeviceArray<cuda::DeviceSamplingParams> params_dev(params);
  DeviceArray<cuda::Mt19937_64> rngs_dev(rngs);
  DeviceArray<int32_t> counts_dev(std::vector<int32_t>(static_cast<size_t>(rows) * kVocab, 0));
  DeviceArray<int32_t> slots_dev(slots), tokens_dev(rows);
  const std::vector<int32_t> top_n(rows, kMaxTop);
  DeviceArray<int32_t> top_n_dev(top_n);
  DeviceArray<float> logprobs_dev(rows);
  DeviceArray<int32_t> top_ids_dev(rows * kMaxTop);
  DeviceArray<float> top_values_dev(rows * kMaxTop);
  std::vector<int32_t> scratch;
  for (int step = 0; step < 10; ++step) {
    SCOPED_TRACE(step);
    const std::vector<float> dense = RandomFloats(static_cast<size_t>(rows) * kVocab, 70 + step, 2.0f);
    std::vector<float> padded(static_cast<size_t>(rows) * kStride, 1e30f);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(dense.begin() + r * kVocab, kVocab, padded.begin() + r * kStride);
    }
    DeviceArray<float> logits_dev(padded);
    cuda::SampleArgs args;
    args.logits = logits_dev.get();
    args.slots = slots_dev.get();
    args.state = {params_dev.get(), counts_dev.get(), rngs_dev.get()};
    args.rows = rows;
    args.vocab = kVocab;
    args.logits_stride = kStride;
    args.tokens = tokens_dev.get();
    ASSERT_TRUE(cuda::LaunchSample(nullptr, args).ok());
    const std::vector<int32_t> got = tokens_dev.Download();

    cuda::TopLogprobsArgs lp;
    lp.logits = logits_dev.get();
    lp.tokens = tokens_dev.get();
    lp.top_n = top_n_dev.get();
    lp.rows = rows;
    lp.vocab = kVocab;
    lp.logits_stride = kStride;
    lp.max_top = kMaxTop;
    lp.logprobs = logprobs_dev.get();
    lp.top_ids = top_ids_dev.get();
    lp.top_logprobs = top_values_dev.get();
    ASSERT_TRUE(cuda::LaunchTopLogprobs(nullptr, lp).ok());
    const std::vector<float> got_logprobs = logprobs_dev.Download();
    const std::vector<int32_t> got_ids = top_ids_dev.Download();
    const std::vector<float> got_values = top_values_dev.Download();
    for (int r = 0; r < rows; ++r) {
      const absl::Span<const float> row(dense.data() + static_cast<size_t>(r) * kVocab, kVocab);
      ASSERT_EQ(got[r], host[r].Sample(row)) << "row " << r;
      EXPECT_FLOAT_EQ(got_logprobs[r], LogProbOf(row, got[r])) << "row " << r;
      std::vector<TokenLogprob> expected(kMaxTop);
      TopLogprobsInto(row, kMaxTop, nullptr, scratch, expected.data());
      for (int k = 0; k < kMaxTop; ++k) {
        EXPECT_EQ(got_ids[r * kMaxTop + k], expected[k].token) << "row " << r << " k " << k;
        EXPECT_FLOAT_EQ(got_values[r * kMaxTop + k], expected[k].logprob);
      }
    }
  }
  // A stride shorter than a row is refused, naming the field.
  cuda::SampleArgs bad;
  bad.rows = 1;
  bad.vocab = kVocab;
  bad.logits_stride = kVocab - 1;
  const absl::Status status = cuda::LaunchSample(nullptr, bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("logits_stride"), std::string::npos) << status;
}

}  // namespace
}  // namespace linserve
