#include "client/loadtest/distribution.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::loadtest {
namespace {

using ::testing::HasSubstr;

TEST(DistributionTest, FixedInBothSpellings) {
  std::mt19937_64 rng(1);
  for (const char* spec : {"12", "fixed:12"}) {
    auto d = Distribution::Parse(spec, "--prompt-tokens", 1, 100);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->kind(), Distribution::Kind::kFixed);
    EXPECT_EQ(d->ToString(), "fixed:12");
    EXPECT_EQ(d->max(), 12);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(d->Sample(rng), 12);
  }
}

TEST(DistributionTest, UniformCoversBothEndsAndNothingElse) {
  auto d = Distribution::Parse("uniform:3:6", "--output-tokens", 1, 100);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->max(), 6);
  EXPECT_EQ(d->ToString(), "uniform:3:6");
  std::mt19937_64 rng(7);
  int counts[4] = {};
  for (int i = 0; i < 4000; ++i) {
    const int64_t v = d->Sample(rng);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 6);
    ++counts[v - 3];
  }
  for (int c : counts) EXPECT_GT(c, 800);  // ~1000 each
}

TEST(DistributionTest, NormalHasItsMomentsAndIsClamped) {
  auto d = Distribution::Parse("normal:50:10", "--prompt-tokens", 1, 1000);
  ASSERT_TRUE(d.ok()) << d.status();
  std::mt19937_64 rng(3);
  double sum = 0;
  double sum_sq = 0;
  constexpr int kN = 20000;
  for (int i = 0; i < kN; ++i) {
    const auto v = static_cast<double>(d->Sample(rng));
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / kN;
  EXPECT_NEAR(mean, 50, 0.5);
  EXPECT_NEAR(std::sqrt(sum_sq / kN - mean * mean), 10, 0.5);

  auto clamped = Distribution::Parse("normal:2:50", "--prompt-tokens", 1, 5);
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(clamped->max(), 5);
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = clamped->Sample(rng);
    ASSERT_GE(v, 1);
    ASSERT_LE(v, 5);
  }
}

TEST(DistributionTest, SameSeedSameSequence) {
  auto d = Distribution::Parse("normal:20:5", "--x", 0, 100);
  ASSERT_TRUE(d.ok());
  std::mt19937_64 a(42);
  std::mt19937_64 b(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(d->Sample(a), d->Sample(b));
}

TEST(DistributionTest, ZeroAllowedWhenTheRangeStartsAtZero) {
  auto d = Distribution::Parse("0", "--think-time-ms", 0, 1000);
  ASSERT_TRUE(d.ok()) << d.status();
  std::mt19937_64 rng(1);
  EXPECT_EQ(d->Sample(rng), 0);
}

TEST(DistributionTest, RejectsBadSpecsNamingTheFlagAndRange) {
  for (const char* spec : {"", "0", "-3", "abc", "fixed:", "fixed:1:2", "uniform:5", "uniform:6:3",
                           "uniform:0:4", "uniform:1:101", "normal:10", "normal:10:-1",
                           "normal:0:1", "normal:nan:1", "normal:10:inf", "poisson:3", "101"}) {
    auto d = Distribution::Parse(spec, "--prompt-tokens", 1, 100);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(std::string("--prompt-tokens=") + spec));
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("[1, 100]"));
  }
}

TEST(UniformUnitTest, InHalfOpenUnitInterval) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 10000; ++i) {
    const double u = UniformUnit(rng);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace linserve::loadtest
