#include "server/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace linserve {
namespace {

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", value);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} with `extra` appended (the histogram's le label); "" when there are none.
std::string RenderLabels(const MetricLabels& labels,
                         const std::pair<std::string, std::string>* extra = nullptr) {
  MetricLabels all = labels;
  if (extra != nullptr) all.push_back(*extra);
  if (all.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < all.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", all[i].first, "=\"", EscapeLabelValue(all[i].second),
                    "\"");
  }
  return out + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> ExponentialBuckets(double base, double factor, int count) {
  std::vector<double> bounds;
  double bound = base;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(std::string_view name, std::string_view help,
                                                    Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}, {}, {}}).first;
  }
  return it->second;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[labels];
  if (slot == nullptr) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[labels];
  if (slot == nullptr) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const std::vector<double>& bounds,
                                         const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kHistogram).histograms[labels];
  if (slot == nullptr) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

std::string MetricsRegistry::RenderPrometheus() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) {
    const char* type = family.type == Type::kCounter ? "counter"
                       : family.type == Type::kGauge ? "gauge"
                                                     : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n# TYPE ", name, " ",
                    type, "\n");
    for (const auto& [labels, counter] : family.counters) {
      absl::StrAppend(&out, name, RenderLabels(labels), " ", FormatValue(counter->value()), "\n");
    }
    for (const auto& [labels, gauge] : family.gauges) {
      absl::StrAppend(&out, name, RenderLabels(labels), " ", FormatValue(gauge->value()), "\n");
    }
    for (const auto& [labels, histogram] : family.histograms) {
      const Histogram::Snapshot s = histogram->snapshot();
      for (size_t i = 0; i <= s.bounds.size(); ++i) {
        const std::pair<std::string, std::string> le{
            "le", i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf"};
        absl::StrAppend(&out, name, "_bucket", RenderLabels(labels, &le), " ", s.cumulative[i],
                        "\n");
      }
      absl::StrAppend(&out, name, "_sum", RenderLabels(labels), " ", FormatValue(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", RenderLabels(labels), " ", s.count, "\n");
    }
  }
  return out;
}

}  // namespace linserve
