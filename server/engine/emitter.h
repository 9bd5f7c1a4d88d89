// Emitter: the threads that hand each request's output to its TokenSink (the client's stream),
// so that the engine thread never waits on a transport (issue 38; docs/architecture.md §2.2).
// The engine thread still decides everything — which token, whether a stop string or EOS ends
// the request, what the session keeps — and posts the sink calls here; the emitter runs them.
// All of one request's calls go to the same thread (its job id picks it), in the order they
// were posted, so each stream stays in order and its OnFinish comes last. Tokens are staged on
// the engine thread and handed over a step at a time (Flush: one lock per emitter thread, not
// one per token). With no threads every call runs at once on the posting thread.
//
// StageToken and Flush: one thread (the engine's). Post and Drain: any thread; a Post that
// must follow staged tokens of the same request comes after a Flush.
#ifndef LINSERVE_SERVER_ENGINE_EMITTER_H_
#define LINSERVE_SERVER_ENGINE_EMITTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/job_id.h"
#include "server/engine/token_sink.h"

namespace linserve {

class Emitter {
 public:
  // `threads` >= 0.
  explicit Emitter(int32_t threads);
  // Runs what is staged and queued, then stops the threads.
  ~Emitter();
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  // Stages sink->OnToken(token, text) for `job`'s thread; the next Flush queues it there.
  void StageToken(JobId job, std::shared_ptr<TokenSink> sink, GeneratedToken token,
                  std::string text);
  // Queues what StageToken staged, in order.
  void Flush();
  // Queues `call` (an OnFinish, typically) on `job`'s thread, after the calls queued before.
  void Post(JobId job, absl::AnyInvocable<void() &&> call);
  // Blocks until every call posted before it has run.
  void Drain();

 private:
  struct Item {
    std::shared_ptr<TokenSink> sink;  // with it a token; without it `call`
    GeneratedToken token;
    std::string text;
    absl::AnyInvocable<void() &&> call;
  };
  struct Shard {
    absl::Mutex mu;
    std::vector<Item> queue ABSL_GUARDED_BY(mu);
    int64_t posted ABSL_GUARDED_BY(mu) = 0;
    int64_t done ABSL_GUARDED_BY(mu) = 0;
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };

  struct DrainTarget {
    Shard* shard;
    int64_t posted;
  };

  Shard& ShardOf(JobId job) { return *shards_[job.value % shards_.size()]; }
  static void Run(Shard& shard);
  // absl::Condition predicates, evaluated with the shard's mutex held.
  static bool HasWork(Shard* shard) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  static bool Drained(DrainTarget* target) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::vector<Item>> staged_;  // per shard; the staging thread's alone
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_EMITTER_H_
