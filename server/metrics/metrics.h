// A small thread-safe metrics registry rendered in the Prometheus text exposition format
// (version 0.0.4). The engine and the transport record into it; the HTTP endpoint renders it.
#ifndef LINSERVE_SERVER_METRICS_METRICS_H_
#define LINSERVE_SERVER_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace linserve {

// Label name/value pairs, in the order they are rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(double delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts into `counter` when there is one: a component that counts its own events is handed its
// counters at construction, or none where nothing collects them (its tests).
inline void Increment(Counter* counter, double delta = 1) {
  if (counter != nullptr) counter->Increment(delta);
}

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds`: strictly increasing upper bounds of the finite buckets (+Inf is implicit).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, last is +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bucket bounds base, base·factor, ... (count of them).
std::vector<double> ExponentialBuckets(double base, double factor, int count);

// Instruments live as long as the registry; the returned references stay valid. Asking again
// for the same (name, labels) returns the same instrument; a name keeps the type and help it
// was first registered with.
class MetricsRegistry {
 public:
  Counter& GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help,
                          const std::vector<double>& bounds, const MetricLabels& labels = {});

  // Every metric in the Prometheus text format, families sorted by name.
  std::string RenderPrometheus() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<Gauge>> gauges;
    std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(std::string_view name, std::string_view help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_METRICS_METRICS_H_
