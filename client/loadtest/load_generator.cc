#include "client/loadtest/load_generator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace linserve::loadtest {
namespace {

constexpr int32_t kMaxThreads = 4096;

absl::Status OutOfRange(absl::string_view flag, double value, absl::string_view range) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, " is outside ", range));
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Threads that run submitted tasks, created on demand up to a cap; a task submitted while all
// `max_threads` are busy is refused rather than queued.
class WorkerPool {
 public:
  explicit WorkerPool(int32_t max_threads) : max_threads_(max_threads) {}
  ~WorkerPool() { Join(); }

  bool TrySubmit(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    if (idle_ > static_cast<int32_t>(tasks_.size())) {
      tasks_.push_back(std::move(task));
      return true;
    }
    if (static_cast<int32_t>(threads_.size()) >= max_threads_) return false;
    tasks_.push_back(std::move(task));
    threads_.emplace_back([this] { Work(); });
    return true;
  }

  // Runs what was submitted, then stops every thread.
  void Join() {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  void Work() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        ++idle_;
        mu_.Await(absl::Condition(
            +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return !p->tasks_.empty() || p->closing_;
            },
            this));
        --idle_;
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  const int32_t max_threads_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int32_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

class LoadRun {
 public:
  LoadRun(LoadTarget& target, const LoadOptions& options)
      : target_(target),
        o_(options),
        warmup_s_(absl::ToDoubleSeconds(options.warmup)),
        end_s_(warmup_s_ + absl::ToDoubleSeconds(options.duration)),
        start_(std::chrono::steady_clock::now()) {}

  LoadResult Execute();

 private:
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  bool Stopped() const { return stop_.HasBeenNotified(); }
  // Stops new work (idempotent), remembering when.
  void StopIssuing();
  // False (and stops) once the time bound has passed.
  bool WithinTime();
  // Counts a unit as active unless new work has stopped (then false); every true is paired
  // with one ExitUnit.
  bool EnterUnit();
  void ExitUnit();
  // Reserves one request under the bounds; false once they are reached.
  bool BeginRequest(bool& measured);

  void RunUnit(uint64_t index);
  void RunSession(std::mt19937_64& rng);
  // A conversation of o_.turns turns without a session, each resending the whole history.
  void RunResend(std::mt19937_64& rng);
  // One Generate call; false when the bounds stopped it from starting or it failed. With
  // `history`, the prompt is the history then the new tokens, and on success the history
  // becomes that prompt and the reply.
  bool Request(const std::string& session_id, std::mt19937_64& rng,
               std::vector<int32_t>* history = nullptr);
  // Times one session RPC and records it; true when it succeeded.
  template <typename Fn>
  bool Operation(const std::string& name, Fn&& fn);
  void ClosedLoop(std::vector<std::thread>& threads);
  void OpenLoop(WorkerPool& pool);
  void Progress();
  void PrintProgress(bool final);

  LoadTarget& target_;
  const LoadOptions& o_;
  const double warmup_s_;
  const double end_s_;
  const std::chrono::steady_clock::time_point start_;

  absl::Notification stop_;
  absl::Notification finished_;
  std::atomic<uint64_t> next_unit_{0};
  std::atomic<int64_t> measured_started_{0};
  std::atomic<int64_t> requests_done_{0};
  std::atomic<int64_t> errors_{0};
  std::atomic<int64_t> tokens_{0};
  std::atomic<int64_t> dropped_{0};

  absl::Mutex mu_;
  int32_t active_units_ ABSL_GUARDED_BY(mu_) = 0;
  double stop_s_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<GenerateRecord> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<OperationRecord> operations_ ABSL_GUARDED_BY(mu_);

  // Progress thread only.
  double last_progress_s_ = 0;
  int64_t last_progress_tokens_ = 0;
};

void LoadRun::StopIssuing() {
  absl::MutexLock lock(&mu_);
  if (stop_s_ < 0) stop_s_ = Elapsed();
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

bool LoadRun::WithinTime() {
  if (Stopped()) return false;
  if (Elapsed() < end_s_) return true;
  StopIssuing();
  return false;
}

bool LoadRun::BeginRequest(bool& measured) {
  if (!WithinTime()) return false;
  measured = Elapsed() >= warmup_s_;
  if (measured && o_.max_requests > 0 &&
      measured_started_.fetch_add(1, std::memory_order_relaxed) >= o_.max_requests) {
    StopIssuing();
    return false;
  }
  return true;
}

bool LoadRun::Request(const std::string& session_id, std::mt19937_64& rng,
                      std::vector<int32_t>* history) {
  // Draw the whole request first so that the workload does not depend on the bounds.
  GenerateCall call;
  call.session_id = session_id;
  call.prompt.resize(static_cast<size_t>(o_.prompt_tokens.Sample(rng)));
  for (int32_t& id : call.prompt) {
    do {
      id = static_cast<int32_t>(rng() % static_cast<uint64_t>(o_.vocab_size));
    } while (std::find(o_.excluded_ids.begin(), o_.excluded_ids.end(), id) !=
             o_.excluded_ids.end());
  }
  call.max_new_tokens = static_cast<int32_t>(o_.output_tokens.Sample(rng));
  call.temperature = o_.temperature;
  call.top_k = o_.top_k;
  call.top_p = o_.top_p;
  call.seed = rng();
  call.ignore_eos = o_.ignore_eos;
  call.timeout = o_.request_timeout;
  if (history != nullptr) call.prompt.insert(call.prompt.begin(), history->begin(), history->end());

  GenerateRecord r;
  if (!BeginRequest(r.measured)) return false;
  r.start_s = Elapsed();
  double last_s = r.start_s;
  const GenerateOutcome outcome = target_.Generate(call, [&](int32_t n) {
    const double now = Elapsed();
    if (r.first_token_s < 0) {
      r.first_token_s = now;
      r.inter_token_s.insert(r.inter_token_s.end(), static_cast<size_t>(n - 1), 0.0);
    } else {
      r.inter_token_s.insert(r.inter_token_s.end(), static_cast<size_t>(n), (now - last_s) / n);
    }
    last_s = now;
    r.output_tokens += n;
    tokens_.fetch_add(n, std::memory_order_relaxed);
  });
  r.end_s = Elapsed();
  r.code = outcome.status.code();
  r.prompt_tokens = outcome.prompt_tokens;
  r.cached_prompt_tokens = outcome.cached_prompt_tokens;
  const bool ok = outcome.status.ok();
  if (ok && history != nullptr) {
    *history = std::move(call.prompt);
    history->insert(history->end(), outcome.tokens.begin(), outcome.tokens.end());
  }
  (ok ? requests_done_ : errors_).fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  requests_.push_back(std::move(r));
  return ok;
}

template <typename Fn>
bool LoadRun::Operation(const std::string& name, Fn&& fn) {
  OperationRecord record;
  record.op = name;
  const double start = Elapsed();
  record.measured = start >= warmup_s_;
  const absl::Status status = fn(record.bytes);
  record.latency_s = Elapsed() - start;
  record.code = status.code();
  if (!status.ok()) errors_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  operations_.push_back(std::move(record));
  return status.ok();
}

void LoadRun::RunSession(std::mt19937_64& rng) {
  const absl::Duration timeout = o_.request_timeout;
  if (Stopped()) return;
  std::string id;
  const bool created = Operation("create", [&](int64_t&) {
    absl::StatusOr<std::string> session = target_.CreateSession(timeout);
    if (session.ok()) id = *session;
    return session.status();
  });
  if (!created) return;
  bool completed = true;
  for (int32_t turn = 0; turn < o_.turns && completed; ++turn) {
    if (turn > 0) {
      const int64_t think_ms = o_.think_time_ms.Sample(rng);
      if (think_ms > 0 && stop_.WaitForNotificationWithTimeout(absl::Milliseconds(think_ms))) {
        completed = false;
        break;
      }
    }
    completed = Request(id, rng);
  }
  if (completed && o_.fork && !Stopped()) {
    std::string fork_id;
    const bool forked = Operation("fork", [&](int64_t&) {
      absl::StatusOr<std::string> fork = target_.ForkSession(id, timeout);
      if (fork.ok()) fork_id = *fork;
      return fork.status();
    });
    if (forked) {
      Request(fork_id, rng);
      Operation("delete", [&](int64_t&) { return target_.DeleteSession(fork_id, timeout); });
    }
  }
  if (completed && o_.export_session && !Stopped()) {
    Operation("export", [&](int64_t& bytes) {
      absl::StatusOr<int64_t> size = target_.ExportSession(id, timeout);
      if (size.ok()) bytes = *size;
      return size.status();
    });
  }
  Operation("delete", [&](int64_t&) { return target_.DeleteSession(id, timeout); });
}

void LoadRun::RunResend(std::mt19937_64& rng) {
  std::vector<int32_t> history;
  for (int32_t turn = 0; turn < o_.turns; ++turn) {
    if (turn > 0) {
      const int64_t think_ms = o_.think_time_ms.Sample(rng);
      if (think_ms > 0 && stop_.WaitForNotificationWithTimeout(absl::Milliseconds(think_ms))) {
        return;
      }
    }
    if (!Request("", rng, &history)) return;
  }
}

void LoadRun::RunUnit(uint64_t index) {
  std::mt19937_64 rng(SplitMix64(o_.seed ^ SplitMix64(index)));
  if (o_.resend) {
    RunResend(rng);
  } else if (o_.turns == 0) {
    Request("", rng);
  } else {
    RunSession(rng);
  }
}

bool LoadRun::EnterUnit() {
  absl::MutexLock lock(&mu_);
  if (stop_s_ >= 0) return false;
  if (const double now = Elapsed(); now >= end_s_) {
    stop_s_ = now;
    stop_.Notify();
    return false;
  }
  ++active_units_;
  return true;
}

void LoadRun::ExitUnit() {
  absl::MutexLock lock(&mu_);
  --active_units_;
}

void LoadRun::ClosedLoop(std::vector<std::thread>& threads) {
  for (int32_t i = 0; i < o_.concurrency; ++i) {
    threads.emplace_back([this] {
      while (EnterUnit()) {
        RunUnit(next_unit_.fetch_add(1, std::memory_order_relaxed));
        ExitUnit();
      }
    });
  }
}

void LoadRun::OpenLoop(WorkerPool& pool) {
  std::mt19937_64 arrivals(SplitMix64(o_.seed));
  double next_s = 0;
  while (true) {
    // Exponential inter-arrival times: a Poisson process of rate o_.rate.
    next_s += -std::log1p(-UniformUnit(arrivals)) / o_.rate;
    const double wait_s = next_s - Elapsed();
    if (wait_s > 0 && stop_.WaitForNotificationWithTimeout(absl::Seconds(wait_s))) return;
    if (!EnterUnit()) return;
    const uint64_t index = next_unit_.fetch_add(1, std::memory_order_relaxed);
    if (!pool.TrySubmit([this, index] {
          RunUnit(index);
          ExitUnit();
        })) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      ExitUnit();
    }
  }
}

void LoadRun::PrintProgress(bool final) {
  const double now = Elapsed();
  const int64_t tokens = tokens_.load(std::memory_order_relaxed);
  const double interval = now - last_progress_s_;
  const double rate = interval > 0 ? static_cast<double>(tokens - last_progress_tokens_) / interval
                                   : 0;
  last_progress_s_ = now;
  last_progress_tokens_ = tokens;
  const bool tty = isatty(fileno(o_.progress)) == 1;
  const std::string line = absl::StrFormat(
      "[%7.1fs]%s requests %d, errors %d, output tokens %d, %.0f tok/s%s", now,
      now < warmup_s_ ? " warm-up" : "", requests_done_.load(std::memory_order_relaxed),
      errors_.load(std::memory_order_relaxed), tokens, rate,
      dropped_.load() > 0 ? absl::StrCat(", dropped ", dropped_.load()) : "");
  if (tty) {
    absl::FPrintF(o_.progress, "\r%s\033[K%s", line, final ? "\n" : "");
  } else {
    absl::FPrintF(o_.progress, "%s\n", line);
  }
  std::fflush(o_.progress);
}

void LoadRun::Progress() {
  while (!finished_.WaitForNotificationWithTimeout(o_.progress_interval)) PrintProgress(false);
  PrintProgress(true);
}

LoadResult LoadRun::Execute() {
  std::thread progress;
  if (o_.progress != nullptr && o_.progress_interval > absl::ZeroDuration()) {
    progress = std::thread([this] { Progress(); });
  }
  std::vector<std::thread> closed_threads;
  auto pool = std::make_unique<WorkerPool>(o_.max_inflight);
  std::thread arrivals;
  if (o_.mode == LoadOptions::Mode::kClosed) {
    ClosedLoop(closed_threads);
  } else {
    arrivals = std::thread([this, &pool] { OpenLoop(*pool); });
  }

  stop_.WaitForNotificationWithTimeout(absl::Seconds(std::max(0.0, end_s_ - Elapsed())));
  StopIssuing();
  if (arrivals.joinable()) arrivals.join();
  bool drained = false;
  {
    absl::MutexLock lock(&mu_);
    drained = mu_.AwaitWithTimeout(
        absl::Condition(+[](int32_t* active) { return *active == 0; }, &active_units_),
        o_.drain_timeout);
  }
  if (!drained) target_.CancelAll();
  for (std::thread& t : closed_threads) t.join();
  pool->Join();
  finished_.Notify();
  if (progress.joinable()) progress.join();

  LoadResult result;
  absl::MutexLock lock(&mu_);
  result.window_start_s = warmup_s_;
  result.window_end_s = std::max(warmup_s_, stop_s_);
  result.requests = std::move(requests_);
  result.operations = std::move(operations_);
  result.dropped_arrivals = dropped_.load();
  return result;
}

}  // namespace

absl::Status ValidateLoadOptions(const LoadOptions& o) {
  if (o.concurrency < 1 || o.concurrency > kMaxThreads) {
    return OutOfRange("concurrency", o.concurrency, absl::StrCat("[1, ", kMaxThreads, "]"));
  }
  if (!(o.rate > 0 && o.rate <= 1e6)) return OutOfRange("rate", o.rate, "(0, 1e6]");
  if (o.max_inflight < 1 || o.max_inflight > kMaxThreads) {
    return OutOfRange("max-inflight", o.max_inflight, absl::StrCat("[1, ", kMaxThreads, "]"));
  }
  if (o.turns < 0 || o.turns > 100000) return OutOfRange("turns", o.turns, "[0, 100000]");
  if ((o.fork || o.export_session) && o.turns == 0) {
    return absl::InvalidArgumentError(
        "--fork and --export need a session workload: set --turns to 1 or more");
  }
  if (o.resend && o.turns == 0) {
    return absl::InvalidArgumentError("--resend needs conversations: set --turns to 1 or more");
  }
  if (o.resend && (o.fork || o.export_session)) {
    return absl::InvalidArgumentError(
        "--resend conversations have no session to fork or export: drop --fork and --export");
  }
  if (o.duration <= absl::ZeroDuration() || o.duration > absl::Hours(24)) {
    return OutOfRange("duration", absl::ToDoubleSeconds(o.duration), "(0, 86400] seconds");
  }
  if (o.max_requests < 0) return OutOfRange("requests", static_cast<double>(o.max_requests), ">= 0");
  if (o.warmup < absl::ZeroDuration() || o.warmup > absl::Hours(1)) {
    return OutOfRange("warmup", absl::ToDoubleSeconds(o.warmup), "[0, 3600] seconds");
  }
  if (o.request_timeout <= absl::ZeroDuration()) {
    return OutOfRange("request-timeout", absl::ToDoubleSeconds(o.request_timeout), "(0, inf)");
  }
  if (o.drain_timeout < absl::ZeroDuration()) {
    return OutOfRange("drain-timeout", absl::ToDoubleSeconds(o.drain_timeout), "[0, inf)");
  }
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return OutOfRange("temperature", o.temperature, "[0, inf)");
  }
  if (o.top_k < 0) return OutOfRange("top-k", o.top_k, ">= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) return OutOfRange("top-p", o.top_p, "(0, 1]");
  if (o.vocab_size <= static_cast<int32_t>(o.excluded_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the server's vocabulary (", o.vocab_size, " ids) leaves no id for random prompts"));
  }
  return absl::OkStatus();
}

LoadResult RunLoad(LoadTarget& target, const LoadOptions& options) {
  LoadRun run(target, options);
  return run.Execute();
}

}  // namespace linserve::loadtest
