// Issue 28: the int8 integer compute path (kernels/cpu/int8_linear.h). The activation quantizer
// against its definition written out here (bitwise); the integer block dot exact against int64
// sums; the whole Linear against a double-precision evaluation of its definition; the AVX2 and
// AVX-512 VNNI paths bitwise identical (the latter only where this CPU has it); and every row
// bitwise itself whatever the rest of its batch and the thread count, on every path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/int8_linear.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/packed_matrix.h"
#include "tests/testing/activation_reference.h"

namespace linserve::cpu {
namespace {

constexpr int64_t kBlock = PackedMatrix::kInt8Block;

std::vector<float> Random(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The paths this host can run: AVX2 always, AVX-512 VNNI where present.
std::vector<CpuIsa> SupportedPaths() {
  std::vector<CpuIsa> paths = {CpuIsa::kAvx2};
  if (CpuSupports(CpuIsa::kAvx512Vnni)) paths.push_back(CpuIsa::kAvx512Vnni);
  return paths;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// int8_linear.h's quantization of one block of `n` values, written out in scalar code.
struct Block {
  float scale = 0.0f;
  int8_t q[kBlock] = {};
  int32_t sum = 0;
};
Block QuantizeRef(const float* x, int64_t n) {
  Block b;
  float amax = 0.0f;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    nan |= std::isnan(x[j]);
    amax = std::max(amax, std::abs(x[j]));
  }
  if (nan) amax = std::numeric_limits<float>::quiet_NaN();
  b.scale = amax / 127.0f;
  if (b.scale == 0.0f) return b;
  for (int64_t j = 0; j < n; ++j) {
    const float v = std::nearbyint(x[j] / b.scale);
    b.q[j] = static_cast<int8_t>(std::isnan(v) ? -127.0f : std::clamp(v, -127.0f, 127.0f));
    b.sum += b.q[j];
  }
  return b;
}

// The weights' blocks as Pack quantizes them: scale and q of W[n][block b].
Block WeightBlock(const std::vector<float>& w, int64_t in, int64_t n, int64_t b) {
  const int64_t len = std::min(kBlock, in - b * kBlock);
  Block block;
  float amax = 0.0f;
  for (int64_t j = 0; j < len; ++j) amax = std::max(amax, std::abs(w[n * in + b * kBlock + j]));
  block.scale = amax / 127.0f;
  for (int64_t j = 0; j < len && block.scale != 0.0f; ++j) {
    block.q[j] = static_cast<int8_t>(std::nearbyint(w[n * in + b * kBlock + j] / block.scale));
  }
  return block;
}

TEST(Int8QuantizeTest, ActivationsAreTheirDefinitionBitwise) {
  const int64_t rows = 3, in = 75, ld = 80, blocks = 3;  // a partial last block
  std::vector<float> x = Random(rows * ld, 21, 2.0f);
  for (int64_t k = 32; k < 64; ++k) x[1 * ld + k] = 0.0f;  // an all-zero block
  x[0] = 0.5f * (x[1] = 127.0f);                           // a tie at 63.5 rounds to 64
  x[2 * ld + 40] = std::numeric_limits<float>::quiet_NaN();
  x[2 * ld + 70] = 1e-42f;  // a subnormal
  std::vector<int8_t> q(rows * blocks * kBlock, 99);
  std::vector<float> scales(rows * blocks);
  std::vector<int32_t> sums(rows * blocks);
  QuantizeActivations(x.data(), rows, ld, in, q.data(), scales.data(), sums.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      SCOPED_TRACE("row " + std::to_string(r) + " block " + std::to_string(b));
      const int64_t i = r * blocks + b;
      const Block ref =
          QuantizeRef(x.data() + r * ld + b * kBlock, std::min(kBlock, in - b * kBlock));
      EXPECT_EQ(Bits(scales[i]), Bits(ref.scale));
      EXPECT_EQ(sums[i], ref.sum);
      for (int64_t j = 0; j < kBlock; ++j) ASSERT_EQ(q[i * kBlock + j], ref.q[j]) << "j " << j;
    }
  }
  EXPECT_EQ(q[0], 64);
  EXPECT_EQ(q[1], 127);
  EXPECT_EQ(scales[1 * blocks + 1], 0.0f);
  EXPECT_TRUE(std::isnan(scales[2 * blocks + 1]));
}

// Integer weights and activations whose every block's largest magnitude is 127 make both
// scales exactly 1 and q the values themselves, so the output is Σ_blocks float(isum) in fp32:
// exact while every partial sum stays below 2²⁴ (in = 1000: |Σ| <= 1000 · 127² < 2²⁴). Rows of
// ±127 against weights of ∓127 put the largest pair sums (2 · 127², AVX2's int16 limit is 32767)
// through every instruction.
TEST(Int8LinearTest, IntegerBlockDotIsExact) {
  const int64_t out = 37, in = 1000, rows = 11;
  const int64_t blocks = (in + kBlock - 1) / kBlock;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> value(-127, 127);
  std::vector<float> w(out * in), x(rows * in);
  for (float& v : w) v = static_cast<float>(value(rng));
  for (float& v : x) v = static_cast<float>(value(rng));
  for (int64_t k = 0; k < in; ++k) {
    x[0 * in + k] = 127.0f;
    x[1 * in + k] = (k % 3 == 0) ? -127.0f : 127.0f;
    w[0 * in + k] = -127.0f;
    w[1 * in + k] = 127.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {  // every block's largest |value| is 127
    for (int64_t n = 0; n < out; ++n) w[n * in + b * kBlock] = (n % 2) ? 127.0f : -127.0f;
    for (int64_t r = 0; r < rows; ++r) x[r * in + b * kBlock] = (r % 2) ? -127.0f : 127.0f;
  }
  const PackedMatrix packed = PackedMatrix::Pack(w.data(), out, in, WeightFormat::kInt8);
  for (CpuIsa isa : SupportedPaths()) {
    SCOPED_TRACE(std::string(CpuIsaName(isa)));
    std::vector<float> y(rows * out);
    Int8Linear(x.data(), rows, in, packed, nullptr, Activation::kNone, LinearOutput::kStore,
               y.data(), out, 1, isa);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t n = 0; n < out; ++n) {
        int64_t expect = 0;
        for (int64_t k = 0; k < in; ++k) {
          expect += static_cast<int64_t>(x[r * in + k]) * static_cast<int64_t>(w[n * in + k]);
        }
        ASSERT_EQ(y[r * out + n], static_cast<float>(expect)) << "row " << r << " col " << n;
      }
    }
    EXPECT_EQ(y[0 * out + 0], -1000.0f * 127 * 127);
  }
}

// The Linear against its definition (int8_linear.h) evaluated in double: quantized weights and
// activations, isum exact, Σ_b isum · fl(w_scale · a_scale), then bias and activation. The kernel
// differs by fp32 rounding only: one rounding per block's fma and one for the bias, each at
// most 2⁻²⁴ of a partial sum bounded by mag = Σ|terms| + |bias|, so (blocks + 1) · 2⁻²⁴ · mag,
// times 1.2 for the activation's slope (GELU's largest is 1.13); the activation itself
// (libmvec, <= 4 ulp) and the accumulation add 8 · 2⁻²⁴ · |result| + 1e-30.
TEST(Int8LinearTest, MatchesADoublePrecisionEvaluationOfItsDefinition) {
  struct Case {
    int64_t rows, out, in;
    Activation act;
    LinearOutput output;
  };
  for (const Case& c : {Case{1, 16, 32, Activation::kNone, LinearOutput::kStore},
                        Case{1, 37, 29, Activation::kGelu, LinearOutput::kAccumulate},
                        Case{3, 50, 33, Activation::kGeluTanh, LinearOutput::kStore},
                        Case{5, 70, 96, Activation::kSilu, LinearOutput::kStore},
                        Case{9, 3, 1, Activation::kRelu, LinearOutput::kAccumulate},
                        Case{17, 100, 130, Activation::kSigmoid, LinearOutput::kStore}}) {
    const int64_t ldx = c.in + 3, ldy = c.out + 5;
    const int64_t blocks = (c.in + kBlock - 1) / kBlock;
    const std::vector<float> x = Random(c.rows * ldx, 31);
    const std::vector<float> w = Random(c.out * c.in, 32, 0.1f);
    const std::vector<float> bias = Random(c.out, 33);
    const std::vector<float> y0 = Random(c.rows * ldy, 34);
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), c.out, c.in, WeightFormat::kInt8);
    for (CpuIsa isa : SupportedPaths()) {
      SCOPED_TRACE(std::string(CpuIsaName(isa)) + " " + std::to_string(c.rows) + "x" +
                   std::to_string(c.out) + "x" + std::to_string(c.in));
      std::vector<float> y = y0;
      Int8Linear(x.data(), c.rows, ldx, packed, bias.data(), c.act, c.output, y.data(), ldy, 2,
                 isa);
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t n = 0; n < c.out; ++n) {
          double acc = 0.0, mag = std::abs(bias[n]);
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t len = std::min(kBlock, c.in - b * kBlock);
            const Block a = QuantizeRef(x.data() + r * ldx + b * kBlock, len);
            const Block wb = WeightBlock(w, c.in, n, b);
            int64_t isum = 0;
            for (int64_t j = 0; j < len; ++j) isum += int64_t{a.q[j]} * wb.q[j];
            const double term = static_cast<double>(isum) * (wb.scale * a.scale);
            acc += term;
            mag += std::abs(term);
          }
          const double base = c.output == LinearOutput::kAccumulate ? y0[r * ldy + n] : 0.0;
          const double expect = ActivationRef(c.act, acc + bias[n]) + base;
          const double bound =
              1.2 * (blocks + 1) * 0x1p-24 * mag + 8 * 0x1p-24 * std::abs(expect) + 1e-30;
          ASSERT_NEAR(y[r * ldy + n], expect, bound) << "row " << r << " col " << n;
        }
        for (int64_t n = c.out; n < ldy; ++n) {
          ASSERT_EQ(y[r * ldy + n], y0[r * ldy + n]) << "wrote past out_features in row " << r;
        }
      }
    }
  }
}

// Row r of a batch equals that row computed alone on AVX2, bitwise: for every batch size 1..40
// (tiles of 1–4 rows on AVX2, 1–8 on AVX-512), 1 and 2 threads, odd shapes (partial panels and
// blocks), on each path this CPU has — so the paths agree with each other and with themselves
// whatever the batch.
void ExpectEveryRowIsItsAloneAvx2Value(CpuIsa isa) {
  struct Shape {
    int64_t out, in;
  };
  for (const Shape& s : {Shape{37, 29}, Shape{100, 65}, Shape{300, 450}, Shape{17, 1000}}) {
    SCOPED_TRACE(std::to_string(s.out) + "x" + std::to_string(s.in));
    const int64_t ld = s.in + 1, rows_max = 40;
    const std::vector<float> x = Random(rows_max * ld, 41, 3.0f);
    const std::vector<float> w = Random(s.out * s.in, 42, 0.05f);
    const std::vector<float> b = Random(s.out, 43);
    const PackedMatrix packed = PackedMatrix::Pack(w.data(), s.out, s.in, WeightFormat::kInt8);
    std::vector<float> alone(rows_max * s.out);
    for (int64_t r = 0; r < rows_max; ++r) {
      Int8Linear(x.data() + r * ld, 1, ld, packed, b.data(), Activation::kGelu,
                 LinearOutput::kStore, alone.data() + r * s.out, s.out, 1, CpuIsa::kAvx2);
    }
    for (int threads : {1, 2}) {
      for (int64_t rows = 1; rows <= rows_max; ++rows) {
        std::vector<float> y(rows * s.out);
        Int8Linear(x.data(), rows, ld, packed, b.data(), Activation::kGelu, LinearOutput::kStore,
                   y.data(), s.out, threads, isa);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(Bits(y[i]), Bits(alone[i]))
              << rows << " rows on " << threads << " threads, row " << i / s.out << " col "
              << i % s.out;
        }
      }
    }
  }
}

TEST(Int8LinearPathsTest, Avx2RowsAreBitwiseThemselvesInEveryBatch) {
  ExpectEveryRowIsItsAloneAvx2Value(CpuIsa::kAvx2);
}

TEST(Int8LinearPathsTest, Avx512VnniIsBitwiseAvx2InEveryBatch) {
  if (!CpuSupports(CpuIsa::kAvx512Vnni)) {
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI (F+BW+VL+VNNI): only the AVX2 path runs here";
  }
  ExpectEveryRowIsItsAloneAvx2Value(CpuIsa::kAvx512Vnni);
}

// Linear dispatches int8 to the path ChosenCpuIsa() names, which LINSERVE_CPU_ISA sets.
TEST(Int8LinearPathsTest, LinserveCpuIsaPicksThePathAndIgnoresWhatItCannotRun) {
  setenv("LINSERVE_CPU_ISA", "avx2", 1);
  EXPECT_EQ(ChosenCpuIsa(), CpuIsa::kAvx2);
  const CpuIsa best = CpuSupports(CpuIsa::kAvx512Vnni) ? CpuIsa::kAvx512Vnni : CpuIsa::kAvx2;
  setenv("LINSERVE_CPU_ISA", "avx512vnni", 1);
  EXPECT_EQ(ChosenCpuIsa(), best);  // where unsupported: ignored, with a warning
  setenv("LINSERVE_CPU_ISA", "sse2", 1);
  EXPECT_EQ(ChosenCpuIsa(), best);
  unsetenv("LINSERVE_CPU_ISA");
  EXPECT_EQ(ChosenCpuIsa(), best);
}

}  // namespace
}  // namespace linserve::cpu
