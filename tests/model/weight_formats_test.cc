// kernels/cpu's weight formats (packed_matrix.h) and the Linear over them (packed_linear.h):
// what Pack stores against the formats' definitions written out here, the kernels against
// double-precision loops over the dequantized and over the original fp32 weights, and the
// bitwise independence of every output from batch size, row index and thread count (int8 on
// the path ChosenCpuIsa() picks; int8_linear_test.cc compares the paths).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/packed_matrix.h"
#include "tests/testing/activation_reference.h"

namespace linserve::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

constexpr WeightFormat kFormats[] = {WeightFormat::kFp32, WeightFormat::kBf16,
                                     WeightFormat::kFp16, WeightFormat::kInt8};

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// The int8 scale of W[row][k]'s block: max |w| / 127 over the block's kInt8Block features.
float Int8Scale(const std::vector<float>& w, int64_t in, int64_t row, int64_t k) {
  const int64_t k0 = k / PackedMatrix::kInt8Block * PackedMatrix::kInt8Block;
  const int64_t k1 = std::min<int64_t>(in, k0 + PackedMatrix::kInt8Block);
  float max_abs = 0.0f;
  for (int64_t j = k0; j < k1; ++j) max_abs = std::max(max_abs, std::abs(w[row * in + j]));
  return max_abs / 127.0f;
}

// The largest |dequantized − w| the format allows for W[row][k].
double WeightErrorBound(WeightFormat format, const std::vector<float>& w, int64_t in,
                        int64_t row, int64_t k) {
  const double v = std::abs(static_cast<double>(w[row * in + k]));
  switch (format) {
    case WeightFormat::kFp32:
      return 0.0;
    case WeightFormat::kBf16:
      return v * 0x1p-9;  // half an ulp of an 8-bit significand
    case WeightFormat::kFp16:
      return v * 0x1p-11 + 0x1p-25;  // half an ulp of 11 bits; half the subnormal spacing
    case WeightFormat::kInt8:
      // Half a step of the block's scale, plus the fp32 roundings of w / scale and q · scale.
      return 0.5 * Int8Scale(w, in, row, k) * (1 + 0x1p-20) + v * 0x1p-23;
  }
  return 0.0;
}

TEST(WeightFormatTest, PackStoresEachFormatsDefinition) {
  const int64_t out = 21, in = 75;  // a partial panel and a partial int8 block
  std::vector<float> w = Random(out * in, 7, 0.5f);
  // Ties and edge values: exact bf16 / fp16 halfway points, subnormals, an all-zero int8 block.
  w[0] = Bits(0x3F808000u);  // halfway between two bf16 values, even below: rounds down
  w[1] = Bits(0x3F818000u);  // halfway, odd below: rounds up
  w[2] = 1.0f + 0x1p-11f;    // fp16 halfway point: rounds to even (1.0)
  w[3] = 3e-6f;              // an fp16 subnormal
  w[4] = 1e-40f;             // an fp32 subnormal
  for (int64_t k = 32; k < 64; ++k) w[5 * in + k] = 0.0f;
  for (WeightFormat format : kFormats) {
    SCOPED_TRACE(std::string(WeightFormatName(format)));
    const PackedMatrix m = PackedMatrix::Pack(w.data(), out, in, format);
    ASSERT_EQ(m.format(), format);
    std::vector<float> d(static_cast<size_t>(out * in));
    m.Dequantize(d.data());
    for (int64_t r = 0; r < out; ++r) {
      for (int64_t k = 0; k < in; ++k) {
        const float v = w[r * in + k];
        const float got = d[r * in + k];
        switch (format) {
          case WeightFormat::kFp32:
            ASSERT_EQ(Bits(got), Bits(v));
            break;
          case WeightFormat::kBf16: {
            // The nearer of the two bf16 values around v; on a tie the one with an even last bit.
            const uint32_t down = Bits(v) & 0xFFFF0000u;
            const double dd = std::abs(static_cast<double>(Bits(down)) - v);
            const double du = std::abs(static_cast<double>(Bits(down + 0x10000u)) - v);
            const uint32_t expect =
                dd < du || (dd == du && (down & 0x10000u) == 0) ? down : down + 0x10000u;
            ASSERT_EQ(Bits(got), expect) << "w[" << r << "][" << k << "] = " << v;
            break;
          }
          case WeightFormat::kFp16:
            ASSERT_EQ(got, static_cast<float>(static_cast<_Float16>(v)))
                << "w[" << r << "][" << k << "] = " << v;
            break;
          case WeightFormat::kInt8: {
            const float scale = Int8Scale(w, in, r, k);
            const float q = scale == 0.0f ? 0.0f : std::nearbyint(v / scale);
            ASSERT_LE(std::abs(q), 127.0f);
            ASSERT_EQ(got, q * scale) << "w[" << r << "][" << k << "] = " << v;
            break;
          }
        }
      }
    }
    EXPECT_EQ(Bits(d[0]), format == WeightFormat::kBf16 ? 0x3F800000u : Bits(d[0]));
    EXPECT_EQ(Bits(d[1]), format == WeightFormat::kBf16 ? 0x3F820000u : Bits(d[1]));
    if (format == WeightFormat::kFp16) {
      EXPECT_EQ(d[2], 1.0f);
    }
    if (format == WeightFormat::kInt8) {
      for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(d[5 * in + k], 0.0f);
    }
  }
}

TEST(WeightFormatTest, BytesCountWhatTheFormatStores) {
  // 64 outputs × 256 inputs: whole panels and blocks, nothing padded.
  const std::vector<float> w = Random(64 * 256, 8);
  EXPECT_EQ(PackedMatrix::Pack(w.data(), 64, 256, WeightFormat::kFp32).bytes(), 64 * 256 * 4);
  EXPECT_EQ(PackedMatrix::Pack(w.data(), 64, 256, WeightFormat::kBf16).bytes(), 64 * 256 * 2);
  EXPECT_EQ(PackedMatrix::Pack(w.data(), 64, 256, WeightFormat::kFp16).bytes(), 64 * 256 * 2);
  // 1 byte per weight and a 4-byte scale per 32.
  EXPECT_EQ(PackedMatrix::Pack(w.data(), 64, 256, WeightFormat::kInt8).bytes(),
            64 * 256 + 64 * 256 / 32 * 4);
}

struct FormatCase {
  WeightFormat format;
  int64_t rows, out, in;
  bool bias;
  Activation act;
  LinearOutput output;
};

std::string CaseName(const ::testing::TestParamInfo<FormatCase>& info) {
  const FormatCase& c = info.param;
  return std::string(WeightFormatName(c.format)) + "_" + std::to_string(c.rows) + "x" +
         std::to_string(c.out) + "x" + std::to_string(c.in) + "_" + std::to_string(info.index);
}

class FormatLinearTest : public ::testing::TestWithParam<FormatCase> {};

// The kernel against double-precision sums over (a) the dequantized weights: the fp32
// rounding of a sequential sum of `in` products, |error| <= in · 2⁻²⁴ · Σ|x·w| plus the
// activation's few ulps, checked as 1e-5 · (Σ|x·w| + |y|) + 1e-6 for in <= 130 (as the fp32
// kernel's own test); for bf16/fp16 also bitwise the fp32 kernel over those weights; (b) the
// original fp32 weights: additionally Σ_k |x_k| · (the format's bound on |w' − w|,
// WeightErrorBound), times 1.2 for the activations' slope (at most 1.13, GELU's). int8
// multiplies quantized activations (int8_linear.h), so its (a) uses them in place of x — the
// kernel then differs from the sum only by the fp32 roundings of w_scale · a_scale and of each
// block's fma — and its (b) adds Σ_k |w'_k| · (half a step of x_k's block scale, plus the fp32
// rounding of x / scale).
TEST_P(FormatLinearTest, MatchesReferencesOverDequantizedAndOriginalWeights) {
  const FormatCase c = GetParam();
  const int64_t ldx = c.in + 3;
  const int64_t ldy = c.out + 5;
  const std::vector<float> x = Random(c.rows * ldx, 1);
  const std::vector<float> w = Random(c.out * c.in, 2, 0.1f);
  const std::vector<float> b = Random(c.out, 3);
  const std::vector<float> y0 = Random(c.rows * ldy, 4);
  const float* bias = c.bias ? b.data() : nullptr;
  const PackedMatrix packed = PackedMatrix::Pack(w.data(), c.out, c.in, c.format);
  std::vector<float> dq(static_cast<size_t>(c.out * c.in));
  packed.Dequantize(dq.data());

  std::vector<float> y = y0;
  Linear(x.data(), c.rows, ldx, packed, bias, c.act, c.output, y.data(), ldy, 1);

  // The activations the kernel multiplies, and the bound on their distance from x.
  const bool int8 = c.format == WeightFormat::kInt8;
  std::vector<double> xa(static_cast<size_t>(c.rows * ldx));
  std::vector<double> x_error(xa.size(), 0.0);
  for (size_t i = 0; i < xa.size(); ++i) xa[i] = x[i];
  if (int8) {
    const int64_t blocks = (c.in + PackedMatrix::kInt8Block - 1) / PackedMatrix::kInt8Block;
    std::vector<int8_t> q(static_cast<size_t>(c.rows * blocks * PackedMatrix::kInt8Block));
    std::vector<float> scales(static_cast<size_t>(c.rows * blocks));
    std::vector<int32_t> sums(scales.size());
    QuantizeActivations(x.data(), c.rows, ldx, c.in, q.data(), scales.data(), sums.data());
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t k = 0; k < c.in; ++k) {
        const int64_t block = r * blocks + k / PackedMatrix::kInt8Block;
        const double scale = scales[block];
        xa[r * ldx + k] = q[block * PackedMatrix::kInt8Block + k % PackedMatrix::kInt8Block] *
                          scale;
        x_error[r * ldx + k] =
            0.5 * scale * (1 + 0x1p-20) + std::abs(static_cast<double>(x[r * ldx + k])) * 0x1p-22;
      }
    }
  } else {
    const PackedMatrix as_fp32 =
        PackedMatrix::Pack(dq.data(), c.out, c.in, WeightFormat::kFp32);
    std::vector<float> y_fp32 = y0;
    Linear(x.data(), c.rows, ldx, as_fp32, bias, c.act, c.output, y_fp32.data(), ldy, 1);
    EXPECT_EQ(y, y_fp32) << "not bitwise the fp32 kernel over the dequantized weights";
  }

  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t n = 0; n < c.out; ++n) {
      double acc_dq = c.bias ? b[n] : 0.0;
      double acc_w = acc_dq;
      double mag = std::abs(acc_dq);
      double weight_error = 0.0;
      for (int64_t k = 0; k < c.in; ++k) {
        const double xk = x[r * ldx + k];
        const double wk = dq[n * c.in + k];
        acc_dq += xa[r * ldx + k] * wk;
        acc_w += xk * w[n * c.in + k];
        mag += std::abs(xa[r * ldx + k] * wk);
        weight_error += std::abs(xk) * WeightErrorBound(c.format, w, c.in, n, k) +
                        std::abs(wk) * x_error[r * ldx + k];
      }
      const double base = c.output == LinearOutput::kAccumulate ? y0[r * ldy + n] : 0.0;
      const double expect_dq = ActivationRef(c.act, acc_dq) + base;
      const double expect_w = ActivationRef(c.act, acc_w) + base;
      const double rounding = 1e-5 * (mag + std::abs(expect_dq)) + 1e-6;
      ASSERT_NEAR(y[r * ldy + n], expect_dq, rounding) << "row " << r << " col " << n;
      ASSERT_NEAR(y[r * ldy + n], expect_w, rounding + 1.2 * weight_error)
          << "row " << r << " col " << n;
    }
    for (int64_t n = c.out; n < ldy; ++n) {
      ASSERT_EQ(y[r * ldy + n], y0[r * ldy + n]) << "wrote past out_features in row " << r;
    }
  }
}

std::vector<FormatCase> Cases() {
  std::vector<FormatCase> cases;
  for (WeightFormat f : kFormats) {
    for (const FormatCase& c : {
             FormatCase{f, 1, 16, 32, true, Activation::kNone, LinearOutput::kStore},
             FormatCase{f, 1, 37, 29, false, Activation::kNone, LinearOutput::kStore},
             FormatCase{f, 1, 100, 65, true, Activation::kGelu, LinearOutput::kAccumulate},
             FormatCase{f, 2, 50, 33, true, Activation::kGeluTanh, LinearOutput::kStore},
             FormatCase{f, 3, 3, 1, true, Activation::kRelu, LinearOutput::kStore},
             FormatCase{f, 4, 70, 96, false, Activation::kSilu, LinearOutput::kStore},
             FormatCase{f, 5, 11, 17, false, Activation::kSigmoid, LinearOutput::kStore},
             FormatCase{f, 6, 64, 48, true, Activation::kGelu, LinearOutput::kStore},
             FormatCase{f, 7, 40, 24, true, Activation::kNone, LinearOutput::kAccumulate},
             FormatCase{f, 13, 50, 100, true, Activation::kGeluTanh, LinearOutput::kStore},
             FormatCase{f, 32, 17, 70, false, Activation::kNone, LinearOutput::kAccumulate},
             FormatCase{f, 70, 96, 128, true, Activation::kGelu, LinearOutput::kStore},
         }) {
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FormatLinearTest, ::testing::ValuesIn(Cases()), CaseName);

// Row r of a batch of `rows` equals that row alone, bitwise, for 1–4 threads; the shape is large
// enough (and odd: 300 outputs, 450 inputs) that 4 threads take part even for one row, and the
// batch sizes cross from the streaming kernel (<= 6 rows) to the widened one (> 6).
TEST(FormatLinearInvarianceTest, EveryRowIsBitwiseItselfWhateverTheBatchAndThreads) {
  const int64_t out = 300, in = 450, ld = 460;
  const std::vector<float> x = Random(70 * ld, 11);
  const std::vector<float> w = Random(out * in, 12, 0.05f);
  const std::vector<float> b = Random(out, 13);
  for (WeightFormat format : kFormats) {
    SCOPED_TRACE(std::string(WeightFormatName(format)));
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), out, in, format);
    std::vector<float> alone(static_cast<size_t>(70 * out));
    for (int64_t r = 0; r < 70; ++r) {
      Linear(x.data() + r * ld, 1, ld, packed, b.data(), Activation::kGelu, LinearOutput::kStore,
             alone.data() + r * out, out, 1);
    }
    for (int threads : {1, 2, 3, 4}) {
      for (int64_t rows : {1, 2, 3, 5, 6, 7, 8, 12, 32, 70}) {
        std::vector<float> y(static_cast<size_t>(rows * out));
        Linear(x.data(), rows, ld, packed, b.data(), Activation::kGelu, LinearOutput::kStore,
               y.data(), out, threads);
        ASSERT_TRUE(std::equal(y.begin(), y.end(), alone.begin()))
            << rows << " rows on " << threads << " threads";
      }
    }
  }
}

// Issue 28: the AVX-512 path (LINSERVE_CPU_ISA=avx512vnni, where this CPU has it) gives bitwise
// the AVX2 path's outputs in every format — fp32/bf16/fp16 run the same fused multiply-adds per
// output on 16 lanes instead of two halves of 8, int8 sums exactly in integers
// (int8_linear_test.cc has more) — on odd shapes, batch sizes 1–40 (the streaming kernel up to 6
// rows, the widened one beyond), 1–2 threads, with bias, GELU and accumulation.
TEST(FormatLinearPathsTest, Avx512IsBitwiseAvx2InEveryFormatAndBatch) {
  if (!CpuSupports(CpuIsa::kAvx512Vnni)) {
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI (F+BW+VL+VNNI): only the AVX2 path runs here";
  }
  struct Shape {
    int64_t out, in;
  };
  for (const Shape& s : {Shape{37, 29}, Shape{100, 65}, Shape{300, 450}}) {
    const int64_t ld = s.in + 2, rows_max = 40;
    const std::vector<float> x = Random(rows_max * ld, 51);
    const std::vector<float> w = Random(s.out * s.in, 52, 0.05f);
    const std::vector<float> b = Random(s.out, 53);
    const std::vector<float> y0 = Random(rows_max * s.out, 54);
    for (WeightFormat format : kFormats) {
      SCOPED_TRACE(std::string(WeightFormatName(format)) + " " + std::to_string(s.out) + "x" +
                   std::to_string(s.in));
      const PackedMatrix packed = PackedMatrix::Pack(w.data(), s.out, s.in, format);
      for (int threads : {1, 2}) {
        for (int64_t rows = 1; rows <= rows_max; ++rows) {
          std::vector<float> y[2] = {y0, y0};
          for (int path = 0; path < 2; ++path) {
            setenv("LINSERVE_CPU_ISA", path == 0 ? "avx2" : "avx512vnni", 1);
            Linear(x.data(), rows, ld, packed, b.data(), Activation::kGelu,
                   LinearOutput::kAccumulate, y[path].data(), s.out, threads);
          }
          unsetenv("LINSERVE_CPU_ISA");
          for (size_t i = 0; i < y[0].size(); ++i) {
            ASSERT_EQ(Bits(y[1][i]), Bits(y[0][i]))
                << rows << " rows on " << threads << " threads, row " << i / s.out << " col "
                << i % s.out;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace linserve::cpu
