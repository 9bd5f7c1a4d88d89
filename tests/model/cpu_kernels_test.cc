// kernels/cpu against naive double-precision loops written straight from docs/architecture.md §4.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear_attention.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/short_conv.h"
#include "kernels/cpu/threads.h"
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

TEST(ParallelForTest, RunsEveryTaskOnceWithDistinctParticipants) {
  for (int threads : {1, 2, 4}) {
    for (int64_t tasks : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      std::vector<std::atomic<std::thread::id>> owner(static_cast<size_t>(threads));
      std::atomic<bool> shared_participant{false};
      ParallelFor(threads, tasks, [&](int64_t task, int participant) {
        ASSERT_GE(participant, 0);
        ASSERT_LT(participant, threads);
        std::thread::id expected{};
        if (!owner[participant].compare_exchange_strong(expected, std::this_thread::get_id()) &&
            expected != std::this_thread::get_id()) {
          shared_participant = true;
        }
        runs[task].fetch_add(1);
      });
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(runs[t].load(), 1) << "task " << t;
      EXPECT_FALSE(shared_participant) << "two threads ran as the same participant";
    }
  }
}

TEST(ParallelForTest, ConcurrentCallersEachGetAllTheirTasks) {
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&failures, c] {
      for (int round = 0; round < 200; ++round) {
        const int64_t tasks = 1 + (round * 7 + c) % 50;
        std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
        ParallelFor(2, tasks, [&](int64_t task, int) { runs[task].fetch_add(1); });
        for (auto& r : runs) {
          if (r.load() != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

struct LinearCase {
  int64_t rows, out, in;
  bool bias;
  Activation act;
  LinearOutput output;
};

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesNaiveLoopAndIsRowAndThreadInvariant) {
  const LinearCase c = GetParam();
  const int64_t ldx = c.in + 3;   // strides larger than the rows exercise ldx/ldy
  const int64_t ldy = c.out + 5;
  const std::vector<float> x = Random(c.rows * ldx, 1);
  const std::vector<float> w = Random(c.out * c.in, 2, 0.1f);
  const std::vector<float> b = Random(c.out, 3);
  const std::vector<float> y0 = Random(c.rows * ldy, 4);
  const PackedMatrix packed = PackedMatrix::Pack(w.data(), c.out, c.in);
  ASSERT_EQ(packed.out_features(), c.out);
  ASSERT_EQ(packed.in_features(), c.in);

  std::vector<float> y1 = y0;
  Linear(x.data(), c.rows, ldx, packed, c.bias ? b.data() : nullptr, c.act, c.output, y1.data(),
         ldy, 1);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t n = 0; n < c.out; ++n) {
      double acc = c.bias ? b[n] : 0.0;
      double mag = std::abs(acc);
      for (int64_t k = 0; k < c.in; ++k) {
        acc += static_cast<double>(x[r * ldx + k]) * w[n * c.in + k];
        mag += std::abs(static_cast<double>(x[r * ldx + k]) * w[n * c.in + k]);
      }
      double expect = ActivationRef(c.act, acc);
      if (c.output == LinearOutput::kAccumulate) expect += y0[r * ldy + n];
      ASSERT_NEAR(y1[r * ldy + n], expect, 1e-5 * (mag + std::abs(expect)) + 1e-6)
          << "row " << r << " col " << n;
    }
    for (int64_t n = c.out; n < ldy; ++n) {
      ASSERT_EQ(y1[r * ldy + n], y0[r * ldy + n]) << "wrote past out_features in row " << r;
    }
  }

  // Two threads, and each row computed on its own: bitwise the same.
  std::vector<float> y2 = y0;
  Linear(x.data(), c.rows, ldx, packed, c.bias ? b.data() : nullptr, c.act, c.output, y2.data(),
         ldy, 2);
  EXPECT_EQ(y1, y2);
  std::vector<float> y3 = y0;
  for (int64_t r = 0; r < c.rows; ++r) {
    Linear(x.data() + r * ldx, 1, ldx, packed, c.bias ? b.data() : nullptr, c.act, c.output,
           y3.data() + r * ldy, ldy, 2);
  }
  EXPECT_EQ(y1, y3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Values(LinearCase{1, 16, 8, true, Activation::kNone, LinearOutput::kStore},
                      LinearCase{1, 37, 29, false, Activation::kNone, LinearOutput::kStore},
                      LinearCase{5, 3, 1, true, Activation::kRelu, LinearOutput::kStore},
                      LinearCase{6, 64, 48, true, Activation::kGelu, LinearOutput::kStore},
                      LinearCase{13, 50, 33, true, Activation::kGeluTanh, LinearOutput::kStore},
                      LinearCase{9, 24, 20, true, Activation::kSilu, LinearOutput::kStore},
                      LinearCase{3, 11, 17, false, Activation::kSigmoid, LinearOutput::kStore},
                      LinearCase{7, 40, 24, true, Activation::kNone, LinearOutput::kAccumulate},
                      LinearCase{20, 17, 70, false, Activation::kNone,
                                 LinearOutput::kAccumulate},
                      LinearCase{64, 96, 128, true, Activation::kGelu, LinearOutput::kStore}));

TEST(GemmTest, AllTransposesMatchNaiveLoop) {
  const int m = 7, n = 5, k = 9;
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      const int lda = (ta == Transpose::kNo ? k : m) + 2;
      const int ldb = (tb == Transpose::kNo ? n : k) + 1;
      const int ldc = n + 4;
      const std::vector<float> a = Random(static_cast<int64_t>(lda) * std::max(m, k), 5);
      const std::vector<float> b = Random(static_cast<int64_t>(ldb) * std::max(n, k), 6);
      std::vector<float> c = Random(static_cast<int64_t>(ldc) * m, 7);
      const std::vector<float> c0 = c;
      Gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          for (int p = 0; p < k; ++p) {
            const double av = ta == Transpose::kNo ? a[i * lda + p] : a[p * lda + i];
            const double bv = tb == Transpose::kNo ? b[p * ldb + j] : b[j * ldb + p];
            acc += av * bv;
          }
          EXPECT_NEAR(c[i * ldc + j], 0.5 * acc + 2.0 * c0[i * ldc + j], 1e-5)
              << "ta " << static_cast<int>(ta) << " tb " << static_cast<int>(tb);
        }
      }
    }
  }
}

TEST(ElementwiseTest, ActivationsMatchReferenceFormulasIncludingTail) {
  for (Activation act : {Activation::kGelu, Activation::kGeluTanh, Activation::kRelu,
                         Activation::kSilu, Activation::kSigmoid}) {
    std::vector<float> x = Random(101, 8, 3.0f);  // 101: a ragged 8-lane tail
    x[0] = 0.0f;
    x[1] = -12.0f;
    x[2] = 12.0f;
    const std::vector<float> x0 = x;
    ApplyActivation(act, x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double expect = ActivationRef(act, x0[i]);
      EXPECT_NEAR(x[i], expect, 2e-6 * (1.0 + std::abs(expect))) << "x = " << x0[i];
    }
  }
}

TEST(ElementwiseTest, LayerNormMatchesDoubleReferenceAndAllowsAliasing) {
  const int64_t rows = 3, dim = 45;
  std::vector<float> x = Random(rows * dim, 9, 4.0f);
  for (float& v : x) v += 100.0f;  // a large mean must not cost precision
  const std::vector<float> g = Random(dim, 10);
  const std::vector<float> b = Random(dim, 11);
  std::vector<float> y(x.size());
  LayerNorm(x.data(), rows, dim, g.data(), b.data(), 1e-5f, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double expect = (x[r * dim + i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
      EXPECT_NEAR(y[r * dim + i], expect, 2e-5 * (1 + std::abs(expect)));
    }
  }
  LayerNorm(x.data(), rows, dim, g.data(), b.data(), 1e-5f, x.data());
  EXPECT_EQ(x, y);
}

TEST(ElementwiseTest, RmsNormMatchesDoubleReferenceAndAllowsAliasing) {
  const int64_t rows = 3, dim = 45;
  std::vector<float> x = Random(rows * dim, 12, 4.0f);
  const std::vector<float> g = Random(dim, 13);
  std::vector<float> y(x.size());
  RmsNorm(x.data(), rows, dim, g.data(), 1e-5f, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    for (int64_t i = 0; i < dim; ++i) {
      const double expect = x[r * dim + i] / std::sqrt(sq / dim + 1e-5) * g[i];
      EXPECT_NEAR(y[r * dim + i], expect, 2e-6 * (1 + std::abs(expect)));
    }
  }
  RmsNorm(x.data(), rows, dim, g.data(), 1e-5f, x.data());
  EXPECT_EQ(x, y);
}

// Kernels 2 (a history of one row) and 4, over three tokens from a zero history.
TEST(ShortConvTest, StepMatchesTheFormulaAndShiftsTheHistory) {
  const int64_t channels = 11;
  for (int kernel : {2, 4}) {
    SCOPED_TRACE(kernel);
    const std::vector<float> taps = Random(kernel * channels, 14);
    const std::vector<float> bias = Random(channels, 15);
    const std::vector<float> u = Random(3 * channels, 16);
    const std::vector<float> gate = Random(3 * channels, 17);
    std::vector<float> history(static_cast<size_t>((kernel - 1) * channels), 0.0f);
    std::vector<float> y(static_cast<size_t>(channels));
    for (int t = 0; t < 3; ++t) {
      ShortConvStep(u.data() + t * channels, gate.data() + t * channels, channels, kernel,
                    taps.data(), bias.data(), history.data(), y.data());
      for (int64_t ch = 0; ch < channels; ++ch) {
        double c = bias[ch];
        for (int j = 0; j < kernel; ++j) {
          const int s = t - (kernel - 1) + j;
          if (s >= 0) c += static_cast<double>(taps[j * channels + ch]) * u[s * channels + ch];
        }
        const double expect = c / (1.0 + std::exp(-c)) * gate[t * channels + ch];
        EXPECT_NEAR(y[ch], expect, 1e-5 * (1 + std::abs(expect))) << t << " " << ch;
      }
      for (int r = 0; r < kernel - 1; ++r) {
        const int s = t - (kernel - 2) + r;
        for (int64_t ch = 0; ch < channels; ++ch) {
          EXPECT_EQ(history[r * channels + ch], s >= 0 ? u[s * channels + ch] : 0.0f);
        }
      }
    }
  }
}

std::vector<double> FeatureMapRef(FeatureMap map, const float* x, int dh, const float* w,
                                  int f_dim) {
  std::vector<double> out(static_cast<size_t>(f_dim));
  double mx = -INFINITY, sq = 0;
  for (int i = 0; i < dh; ++i) {
    mx = std::max(mx, static_cast<double>(x[i]));
    sq += static_cast<double>(x[i]) * x[i];
  }
  for (int f = 0; f < f_dim; ++f) {
    switch (map) {
      case FeatureMap::kEluPlusOne:
        out[f] = x[f] > 0 ? x[f] + 1.0 : std::exp(static_cast<double>(x[f]));
        break;
      case FeatureMap::kRelu:
        out[f] = std::max(0.0, static_cast<double>(x[f]));
        break;
      case FeatureMap::kExp:
        out[f] = std::exp(x[f] - mx);
        break;
      case FeatureMap::kFavorPlus: {
        double wx = 0;
        for (int i = 0; i < dh; ++i) wx += static_cast<double>(w[f * dh + i]) * x[i];
        out[f] = std::exp(wx - 0.5 * sq) / std::sqrt(static_cast<double>(f_dim));
        break;
      }
    }
  }
  return out;
}

TEST(ElementwiseTest, FeatureMapsMatchDefinitions) {
  const int vectors = 6, dh = 13;
  const std::vector<float> x = Random(vectors * dh, 12, 1.5f);
  for (FeatureMap map : {FeatureMap::kEluPlusOne, FeatureMap::kRelu, FeatureMap::kExp,
                         FeatureMap::kFavorPlus}) {
    const int f_dim = map == FeatureMap::kFavorPlus ? 21 : dh;
    const std::vector<float> w = Random(f_dim * dh, 13, 0.3f);
    std::vector<float> out(static_cast<size_t>(vectors * f_dim));
    ApplyFeatureMap(map, x.data(), vectors, dh, w.data(), f_dim, out.data());
    for (int v = 0; v < vectors; ++v) {
      const std::vector<double> expect = FeatureMapRef(map, x.data() + v * dh, dh, w.data(), f_dim);
      for (int f = 0; f < f_dim; ++f) {
        EXPECT_NEAR(out[v * f_dim + f], expect[f], 2e-6 * (1 + std::abs(expect[f])))
            << "map " << static_cast<int>(map) << " vector " << v << " feature " << f;
      }
    }
  }
}

TEST(ElementwiseTest, SinusoidalPositionsFollowTheFormula) {
  const int64_t dim = 10;
  const std::vector<double> den = SinusoidalDenominators(dim);
  for (int64_t position : {int64_t{0}, int64_t{1}, int64_t{777}, int64_t{10000000}}) {
    std::vector<float> x(dim, 1.0f);
    AddSinusoidalPosition(position, den, x.data());
    for (int64_t j = 0; j < dim; ++j) {
      const double angle = position / std::pow(10000.0, 2.0 * (j / 2) / dim);
      const double expect = 1.0 + (j % 2 == 0 ? std::sin(angle) : std::cos(angle));
      EXPECT_NEAR(x[j], expect, 1e-6) << "position " << position << " channel " << j;
    }
  }
}

// The recurrence of docs/architecture.md §4 in double, one token at a time, for one head.
struct HeadRef {
  int f_dim, dh;
  std::vector<double> s, z;
  HeadRef(int f, int d, const float* state) : f_dim(f), dh(d), s(f * d), z(f) {
    for (int i = 0; i < f * d; ++i) s[i] = state[i];
    for (int i = 0; i < f; ++i) z[i] = state[f * d + i];
  }
  std::vector<double> Step(const float* q, const float* k, const float* v, double eps) {
    for (int f = 0; f < f_dim; ++f) {
      for (int d = 0; d < dh; ++d) s[f * dh + d] += static_cast<double>(k[f]) * v[d];
      z[f] += k[f];
    }
    std::vector<double> o(dh, 0.0);
    double den = 0;
    for (int f = 0; f < f_dim; ++f) {
      for (int d = 0; d < dh; ++d) o[d] += q[f] * s[f * dh + d];
      den += q[f] * z[f];
    }
    for (double& x : o) x /= den + eps;
    return o;
  }
};

void ExpectStateNear(const float* state, const HeadRef& ref, double tol) {
  for (int i = 0; i < ref.f_dim * ref.dh; ++i) {
    ASSERT_NEAR(state[i], ref.s[i], tol * (1 + std::abs(ref.s[i]))) << "S[" << i << "]";
  }
  for (int i = 0; i < ref.f_dim; ++i) {
    ASSERT_NEAR(state[ref.f_dim * ref.dh + i], ref.z[i], tol * (1 + std::abs(ref.z[i])))
        << "z[" << i << "]";
  }
}

// Positive features, as every φ produces.
std::vector<float> Features(int64_t n, uint64_t seed) {
  std::vector<float> v = Random(n, seed);
  for (float& x : v) x = std::exp(0.5f * x);
  return v;
}

TEST(LinearAttentionTest, StepMatchesRecurrenceOverManyTokens) {
  const int f_dim = 9, dh = 7, steps = 50;
  const float eps = 1e-6f;
  std::vector<float> state = Features(f_dim * (dh + 1), 14);
  HeadRef ref(f_dim, dh, state.data());
  const std::vector<float> q = Features(steps * f_dim, 15);
  const std::vector<float> k = Features(steps * f_dim, 16);
  const std::vector<float> v = Random(steps * dh, 17);
  std::vector<float> out(dh);
  for (int t = 0; t < steps; ++t) {
    LinearAttentionStep(q.data() + t * f_dim, k.data() + t * f_dim, v.data() + t * dh, f_dim, dh,
                        eps, state.data(), state.data() + f_dim * dh, out.data());
    const std::vector<double> expect =
        ref.Step(q.data() + t * f_dim, k.data() + t * f_dim, v.data() + t * dh, eps);
    for (int d = 0; d < dh; ++d) ASSERT_NEAR(out[d], expect[d], 1e-5) << "token " << t;
  }
  ExpectStateNear(state.data(), ref, 1e-5);
}

TEST(LinearAttentionTest, DecodeBatchEqualsPerHeadStepsForAnyThreadCount) {
  const AttentionShape shape{3, 5, 4, 1e-6f};
  const int batch = 4;
  const int64_t per_layer = shape.StateFloatsPerLayer();
  const std::vector<float> q = Features(batch * shape.heads * shape.feature_dim, 18);
  const std::vector<float> k = Features(batch * shape.heads * shape.feature_dim, 19);
  const std::vector<float> v = Random(batch * shape.heads * shape.head_dim, 20);
  const std::vector<float> init = Features(batch * per_layer, 21);

  std::vector<float> expect_state = init;
  std::vector<float> expect_out(batch * shape.heads * shape.head_dim);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < shape.heads; ++h) {
      float* s = expect_state.data() + b * per_layer + h * shape.StateFloatsPerHead();
      const int64_t row = b * shape.heads + h;
      LinearAttentionStep(q.data() + row * shape.feature_dim, k.data() + row * shape.feature_dim,
                          v.data() + row * shape.head_dim, shape.feature_dim, shape.head_dim,
                          shape.eps, s, s + shape.feature_dim * shape.head_dim,
                          expect_out.data() + row * shape.head_dim);
    }
  }
  for (int threads : {1, 2, 3}) {
    std::vector<float> state = init;
    // Sessions' states need not be contiguous or in batch order.
    std::vector<float*> ptrs = {state.data() + 2 * per_layer, state.data() + 0 * per_layer,
                                state.data() + 3 * per_layer, state.data() + 1 * per_layer};
    std::vector<float> out(expect_out.size());
    std::vector<float> q2(q.size()), k2(k.size()), v2(v.size());
    const int order[] = {2, 0, 3, 1};
    const int64_t qf = shape.heads * shape.feature_dim, vf = shape.heads * shape.head_dim;
    for (int i = 0; i < batch; ++i) {
      std::copy(q.begin() + order[i] * qf, q.begin() + (order[i] + 1) * qf, q2.begin() + i * qf);
      std::copy(k.begin() + order[i] * qf, k.begin() + (order[i] + 1) * qf, k2.begin() + i * qf);
      std::copy(v.begin() + order[i] * vf, v.begin() + (order[i] + 1) * vf, v2.begin() + i * vf);
    }
    LinearAttentionDecode(shape, batch, q2.data(), k2.data(), v2.data(), ptrs.data(), out.data(),
                          threads);
    EXPECT_EQ(state, expect_state) << threads << " threads";
    for (int i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < vf; ++j) {
        ASSERT_EQ(out[i * vf + j], expect_out[order[i] * vf + j]) << threads << " threads";
      }
    }
  }
}

TEST(LinearAttentionTest, ChunkEqualsTokenByTokenForChunkSizes) {
  SetBlasThreads(1);
  const AttentionShape shape{2, 6, 5, 1e-6f};
  const int tokens = 64;
  const int64_t qf = shape.heads * shape.feature_dim, vf = shape.heads * shape.head_dim;
  const std::vector<float> q = Features(tokens * qf, 22);
  const std::vector<float> k = Features(tokens * qf, 23);
  const std::vector<float> v = Random(tokens * vf, 24);
  const std::vector<float> init = Features(shape.StateFloatsPerLayer(), 25);

  std::vector<HeadRef> refs;
  for (int h = 0; h < shape.heads; ++h) {
    refs.emplace_back(shape.feature_dim, shape.head_dim,
                      init.data() + h * shape.StateFloatsPerHead());
  }
  std::vector<double> expect_out(tokens * vf);
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < shape.heads; ++h) {
      const std::vector<double> o =
          refs[h].Step(q.data() + t * qf + h * shape.feature_dim,
                       k.data() + t * qf + h * shape.feature_dim,
                       v.data() + t * vf + h * shape.head_dim, shape.eps);
      std::copy(o.begin(), o.end(), expect_out.begin() + t * vf + h * shape.head_dim);
    }
  }

  for (int chunk : {1, 7, 64}) {
    for (int threads : {1, 2}) {
      std::vector<float> state = init;
      std::vector<float> out(tokens * vf);
      std::vector<float> scratch(LinearAttentionChunkScratchFloats(chunk, threads));
      for (int t0 = 0; t0 < tokens; t0 += chunk) {
        const int n = std::min(chunk, tokens - t0);
        LinearAttentionChunk(shape, n, q.data() + t0 * qf, k.data() + t0 * qf, v.data() + t0 * vf,
                             state.data(), out.data() + t0 * vf, scratch.data(), threads);
      }
      for (int64_t i = 0; i < tokens * vf; ++i) {
        ASSERT_NEAR(out[i], expect_out[i], 1e-5 * (1 + std::abs(expect_out[i])))
            << "chunk " << chunk << " element " << i;
      }
      for (int h = 0; h < shape.heads; ++h) {
        ExpectStateNear(state.data() + h * shape.StateFloatsPerHead(), refs[h], 1e-5);
      }
    }
  }
}

// Varlen prefill: the pieces of a pass (1, 9, 2 and 30 rows, each its own state) in one call
// give bitwise what each piece gets alone, with 1 and 2 threads and chunks of 1, 4 and 8 (a
// one-row chunk is a decode step: bitwise LinearAttentionDecode's), and stay within the
// chunked form's rounding of the token-by-token recurrence.
TEST(LinearAttentionTest, PrefillOfAPassEqualsEachPieceAlone) {
  SetBlasThreads(1);
  const AttentionShape shape{3, 6, 5, 1e-6f};
  const std::vector<int> rows = {1, 9, 2, 30};
  const int tokens = 42;
  const int64_t qf = shape.heads * shape.feature_dim, vf = shape.heads * shape.head_dim;
  const int64_t layer = shape.StateFloatsPerLayer();
  const std::vector<float> q = Features(tokens * qf, 32);
  const std::vector<float> k = Features(tokens * qf, 33);
  const std::vector<float> v = Random(tokens * vf, 34);
  const std::vector<float> init = Features(4 * layer, 35);
  for (int chunk : {1, 4, 8}) {
    for (int threads : {1, 2}) {
      std::vector<float> scratch(LinearAttentionChunkScratchFloats(chunk, threads));
      std::vector<float> together = init, alone = init;
      std::vector<float> out_together(tokens * vf), out_alone(tokens * vf);
      std::vector<PrefillRows> pieces;
      int64_t first = 0;
      for (size_t p = 0; p < rows.size(); ++p) {
        pieces.push_back({first, rows[p], together.data() + p * layer});
        first += rows[p];
      }
      LinearAttentionPrefill(shape, pieces.data(), static_cast<int>(pieces.size()), chunk,
                             q.data(), k.data(), v.data(), out_together.data(), scratch.data(),
                             threads);
      for (size_t p = 0; p < rows.size(); ++p) {
        const int64_t at = pieces[p].first_row;
        const PrefillRows one{0, rows[p], alone.data() + p * layer};
        LinearAttentionPrefill(shape, &one, 1, chunk, q.data() + at * qf, k.data() + at * qf,
                               v.data() + at * vf, out_alone.data() + at * vf, scratch.data(),
                               threads);
      }
      EXPECT_EQ(out_together, out_alone) << "chunk " << chunk << ", " << threads << " threads";
      EXPECT_EQ(together, alone) << "chunk " << chunk << ", " << threads << " threads";
      // The last piece against its recurrence.
      const size_t last = rows.size() - 1;
      std::vector<HeadRef> refs;
      for (int h = 0; h < shape.heads; ++h) {
        refs.emplace_back(shape.feature_dim, shape.head_dim,
                          init.data() + last * layer + h * shape.StateFloatsPerHead());
      }
      for (int64_t t = pieces[last].first_row; t < tokens; ++t) {
        for (int h = 0; h < shape.heads; ++h) {
          const std::vector<double> o =
              refs[h].Step(q.data() + t * qf + h * shape.feature_dim,
                           k.data() + t * qf + h * shape.feature_dim,
                           v.data() + t * vf + h * shape.head_dim, shape.eps);
          for (int d = 0; d < shape.head_dim; ++d) {
            ASSERT_NEAR(out_together[t * vf + h * shape.head_dim + d], o[d],
                        1e-5 * (1 + std::abs(o[d])));
          }
        }
      }
      for (int h = 0; h < shape.heads; ++h) {
        ExpectStateNear(together.data() + last * layer + h * shape.StateFloatsPerHead(), refs[h],
                        1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace linserve::cpu
