// LoopMailbox: closures for an event loop's thread, posted from any thread (the engine's
// callbacks reach the OpenAI API's connections only through it).
#ifndef LINSERVE_SERVER_TRANSPORT_LOOP_MAILBOX_H_
#define LINSERVE_SERVER_TRANSPORT_LOOP_MAILBOX_H_

#include <event2/event.h>

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace linserve {

// Once closed, posts are dropped (the loop is gone); the engine's callbacks may still arrive
// then.
class LoopMailbox {
 public:
  // `wake` is an event of the loop whose callback calls Drain; it must outlive every Post
  // before Close.
  explicit LoopMailbox(event* wake) : wake_(wake) {}

  void Post(absl::AnyInvocable<void() &&> fn);
  // Loop thread: runs everything posted so far.
  void Drain();
  void Close();

 private:
  event* const wake_;
  absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_LOOP_MAILBOX_H_
