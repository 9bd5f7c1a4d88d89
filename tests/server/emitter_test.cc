// Emitter: each request's sink calls on one thread, in the order staged and posted, OnFinish
// last; Drain waits for everything queued before it; the destructor runs what is staged and
// queued; no threads runs every call at once.
#include "server/engine/emitter.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

GeneratedToken Token(TokenId id) {
  GeneratedToken token;
  token.id = id;
  return token;
}

// Records the tokens and the thread of every call.
class ThreadRecordingSink : public TokenSink {
 public:
  void OnToken(const GeneratedToken& token, std::string_view text) override {
    absl::MutexLock lock(&mu_);
    ids_.push_back(token.id);
    text_ += text;
    threads_.push_back(std::this_thread::get_id());
  }
  void OnFinish(const absl::Status&, const GenerationResult&) override {}
  void Finished() {
    absl::MutexLock lock(&mu_);
    finished_after_ = ids_.size();
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<TokenId> ids() const {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  std::string text() const {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  size_t finished_after() const {
    absl::MutexLock lock(&mu_);
    return finished_after_;
  }
  // Whether every call ran on `thread`.
  bool all_on(std::thread::id thread) const {
    absl::MutexLock lock(&mu_);
    for (std::thread::id t : threads_) {
      if (t != thread) return false;
    }
    return !threads_.empty();
  }
  std::thread::id first_thread() const {
    absl::MutexLock lock(&mu_);
    return threads_.empty() ? std::thread::id() : threads_[0];
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<TokenId> ids_;
  std::string text_;
  std::vector<std::thread::id> threads_;
  size_t finished_after_ = 0;
};

TEST(EmitterTest, EachRequestsCallsRunInOrderOnOneThreadWithItsEndLast) {
  constexpr int kJobs = 16;
  constexpr int kTokens = 500;
  std::vector<std::shared_ptr<ThreadRecordingSink>> sinks;
  for (int j = 0; j < kJobs; ++j) sinks.push_back(std::make_shared<ThreadRecordingSink>());
  auto job = [](int j) { return JobId{static_cast<uint64_t>(j)}; };
  {
    Emitter emitter(3);
    // The engine thread stages a step's tokens and flushes them, step after step.
    for (int t = 0; t < kTokens; ++t) {
      for (int j = 0; j < kJobs; ++j) {
        emitter.StageToken(job(j), sinks[j], Token(t),
                           std::string(1, static_cast<char>('a' + t % 26)));
      }
      if (t % 7 == 6) emitter.Flush();
    }
    emitter.Flush();
    // The ends: half from the engine thread, half from another (the persister's, in the
    // engine), each after its request's tokens were flushed.
    std::thread second([&] {
      for (int j = kJobs / 2; j < kJobs; ++j) {
        emitter.Post(job(j), [sink = sinks[j]] { sink->Finished(); });
      }
    });
    for (int j = 0; j < kJobs / 2; ++j) {
      emitter.Post(job(j), [sink = sinks[j]] { sink->Finished(); });
    }
    second.join();
    emitter.Drain();
    for (int j = 0; j < kJobs; ++j) {
      SCOPED_TRACE(j);
      const std::vector<TokenId> ids = sinks[j]->ids();
      ASSERT_EQ(ids.size(), static_cast<size_t>(kTokens));
      for (int t = 0; t < kTokens; ++t) EXPECT_EQ(ids[t], t);
      EXPECT_EQ(sinks[j]->finished_after(), static_cast<size_t>(kTokens));
      EXPECT_TRUE(sinks[j]->all_on(sinks[j]->first_thread()));
      EXPECT_NE(sinks[j]->first_thread(), std::this_thread::get_id());
      EXPECT_EQ(sinks[j]->text().substr(0, 3), "abc");
    }
  }
}

TEST(EmitterTest, TheDestructorRunsWhatIsStagedAndQueued) {
  auto sink = std::make_shared<ThreadRecordingSink>();
  {
    Emitter emitter(2);
    for (int t = 0; t < 1000; ++t) {
      emitter.StageToken(JobId{7}, sink, Token(t), "");
      if (t == 499) emitter.Flush();
    }
  }
  EXPECT_EQ(sink->ids().size(), 1000u);
}

TEST(EmitterTest, WithoutThreadsEveryCallRunsAtOnceOnTheCaller) {
  Emitter emitter(0);
  auto sink = std::make_shared<ThreadRecordingSink>();
  emitter.StageToken(JobId{1}, sink, Token(5), "x");
  EXPECT_EQ(sink->ids(), std::vector<TokenId>{5});
  bool ran = false;
  emitter.Post(JobId{1}, [&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_TRUE(sink->all_on(std::this_thread::get_id()));
}

}  // namespace
}  // namespace linserve
