#include "server/metrics/metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersCountersGaugesAndHistogramsInPrometheusFormat) {
  MetricsRegistry registry;
  registry.GetCounter("req_total", "Requests", {{"code", "OK"}}).Increment(3);
  registry.GetCounter("req_total", "Requests", {{"code", "NOT_FOUND"}}).Increment();
  registry.GetGauge("depth", "Queue depth").Set(7);
  Histogram& h = registry.GetHistogram("lat_seconds", "Latency", {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(5);

  const std::string text = registry.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("# HELP req_total Requests\n# TYPE req_total counter\n"));
  EXPECT_THAT(text, HasSubstr("req_total{code=\"OK\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("req_total{code=\"NOT_FOUND\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE depth gauge\ndepth 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE lat_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"0.10000000000000001\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_bucket{le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_sum 5.1500000000000004\n"));
  EXPECT_THAT(text, HasSubstr("lat_seconds_count 3\n"));
}

TEST(MetricsTest, SameNameAndLabelsGiveTheSameInstrument) {
  MetricsRegistry registry;
  Counter& a = registry.GetCounter("c", "help", {{"k", "v"}});
  Counter& b = registry.GetCounter("c", "help", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &registry.GetCounter("c", "help", {{"k", "w"}}));
}

TEST(MetricsTest, EscapesLabelValues) {
  MetricsRegistry registry;
  registry.GetCounter("c", "help", {{"path", "a\"b\\c\nd"}}).Increment();
  EXPECT_THAT(registry.RenderPrometheus(), HasSubstr("c{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

}  // namespace
}  // namespace linserve
