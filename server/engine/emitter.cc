#include "server/engine/emitter.h"

#include <iterator>
#include <utility>

namespace linserve {

Emitter::Emitter(int32_t threads) : staged_(static_cast<size_t>(threads)) {
  for (int32_t i = 0; i < threads; ++i) {
    shards_.push_back(std::make_unique<Shard>());
    Shard* shard = shards_.back().get();
    shard->thread = std::thread([shard] { Run(*shard); });
  }
}

Emitter::~Emitter() {
  Flush();
  for (const std::unique_ptr<Shard>& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->stop = true;
  }
  for (const std::unique_ptr<Shard>& shard : shards_) shard->thread.join();
}

void Emitter::StageToken(JobId job, std::shared_ptr<TokenSink> sink, GeneratedToken token,
                         std::string text) {
  if (shards_.empty()) {
    sink->OnToken(token, text);
    return;
  }
  staged_[job.value % shards_.size()].push_back(Item{.sink = std::move(sink),
                                                     .token = std::move(token),
                                                     .text = std::move(text),
                                                     .call = nullptr});
}

void Emitter::Flush() {
  for (size_t i = 0; i < shards_.size(); ++i) {
    std::vector<Item>& staged = staged_[i];
    if (staged.empty()) continue;
    Shard& shard = *shards_[i];
    absl::MutexLock lock(&shard.mu);
    shard.posted += static_cast<int64_t>(staged.size());
    if (shard.queue.empty()) {
      shard.queue.swap(staged);  // the common case: the thread has taken the last batch
    } else {
      std::move(staged.begin(), staged.end(), std::back_inserter(shard.queue));
      staged.clear();
    }
  }
}

void Emitter::Post(JobId job, absl::AnyInvocable<void() &&> call) {
  if (shards_.empty()) {
    std::move(call)();
    return;
  }
  Shard& shard = ShardOf(job);
  absl::MutexLock lock(&shard.mu);
  shard.queue.push_back(Item{.sink = nullptr, .token = {}, .text = {}, .call = std::move(call)});
  ++shard.posted;
}

void Emitter::Drain() {
  for (const std::unique_ptr<Shard>& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    DrainTarget target{shard.get(), shard->posted};
    shard->mu.Await(absl::Condition(&Drained, &target));
  }
}

bool Emitter::Drained(DrainTarget* target) { return target->shard->done >= target->posted; }

bool Emitter::HasWork(Shard* shard) { return shard->stop || !shard->queue.empty(); }

void Emitter::Run(Shard& shard) {
  std::vector<Item> batch;
  int64_t ran = 0;
  while (true) {
    batch.clear();  // outside the lock: a sink's or a call's destructor may post again
    {
      absl::MutexLock lock(&shard.mu);
      shard.done += ran;
      shard.mu.Await(absl::Condition(&HasWork, &shard));
      if (shard.queue.empty()) return;  // stopping, nothing left
      batch.swap(shard.queue);
      ran = static_cast<int64_t>(batch.size());
    }
    for (Item& item : batch) {
      if (item.sink != nullptr) {
        item.sink->OnToken(item.token, item.text);
      } else {
        std::move(item.call)();
      }
    }
  }
}

}  // namespace linserve
