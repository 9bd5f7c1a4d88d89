// TSan annotations for Debian's uninstrumented Abseil synchronisation primitives (and
// absl::Status's reference count).
//
// ThreadSanitizer learns happens-before from the pthread calls and atomics it intercepts or
// instruments. absl::Mutex, CondVar, Notification, BlockingCounter and Barrier live in Debian's
// libabsl_synchronization.so, built without -fsanitize=thread, and synchronise through their own
// atomics and futexes: TSan sees none of it, and reports every field guarded by an absl::Mutex as a
// data race. Abseil built with TSan annotates itself (ABSL_TSAN_MUTEX_*); this file adds the
// equivalent from outside. Linked into every executable of a LINSERVE_SANITIZE=thread build, it
// defines the public entry points of those classes, so that calls from our code and from other
// libraries (through the PLT) reach it first; each definition forwards to the real one (found with
// dlsym(RTLD_NEXT)) and tells TSan that the object was released before and acquired after.
//
// Abseil evaluates a waiter's Condition inside its own code, holding the mutex; Condition::Eval is
// wrapped too, and brackets the evaluation with an acquire and a release of that mutex.
//
// What TSan still checks: every access our code makes to memory shared between threads. An access
// not ordered by a lock, notification or atomic is still reported. What it gives up: lock-order
// (deadlock) detection for absl::Mutex (Abseil's own detector is off, see below), and two readers
// under one ReaderLock are ordered with each other (TSan misses a write made under a reader lock).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/internal/strerror.h"
#include "absl/base/options.h"
#include "absl/status/status.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define LINSERVE_STR2(x) #x
#define LINSERVE_STR(x) LINSERVE_STR2(x)

// The real definition of absl::<inline namespace>::<tail> (a mangled name with the namespace's
// length-prefixed name cut out), from the library loaded after this executable.
void* Real(const char* tail) {
  static const std::string kPrefix = [] {
    const std::string ns = LINSERVE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
    return std::to_string(ns.size()) + ns;
  }();
  std::string name(tail);
  name.replace(name.find('@'), 1, kPrefix);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_tsan_annotations: %s not found\n", name.c_str());
    std::abort();
  }
  return fn;
}

// Resolves once per call site. `tail` spells the mangled name with '@' for the namespace.
#define LINSERVE_REAL(type, tail)      \
  ([]() -> type {                      \
    static void* fn = Real(tail);      \
    return reinterpret_cast<type>(fn); \
  }())

void Acquire(const void* addr) { __tsan_acquire(const_cast<void*>(addr)); }
void Release(const void* addr) { __tsan_release(const_cast<void*>(addr)); }

// The mutex whose operation this thread is inside. Abseil evaluates a waiter's Condition inside
// such an operation, holding that mutex: in the waiter's own LockWhen/Await, or in the Unlock of
// another thread that hands the mutex over. Condition::Eval below brackets the evaluation with
// an acquire and a release of this mutex, as Abseil's own annotations do.
thread_local const absl::Mutex* tls_mutex = nullptr;

class InMutexOp {
 public:
  explicit InMutexOp(const absl::Mutex* mu) : saved_(tls_mutex) { tls_mutex = mu; }
  ~InMutexOp() { tls_mutex = saved_; }
  InMutexOp(const InMutexOp&) = delete;
  InMutexOp& operator=(const InMutexOp&) = delete;

 private:
  const absl::Mutex* saved_;
};

// Abseil's deadlock detector keeps its lock graph under an uninstrumented spin lock; TSan would
// report the graph's updates (memmove) as races between any two threads that lock a Mutex. TSan
// runs its own lock-order checks on what it sees, so Abseil's are switched off in these builds.
[[maybe_unused]] const bool kAbslDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*), "_ZN4absl@5Mutex4LockEv")(this);
  Acquire(this);
}
void Mutex::Unlock() {
  Release(this);
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*), "_ZN4absl@5Mutex6UnlockEv")(this);
}
bool Mutex::TryLock() {
  InMutexOp op(this);
  const bool locked = LINSERVE_REAL(bool (*)(Mutex*), "_ZN4absl@5Mutex7TryLockEv")(this);
  if (locked) Acquire(this);
  return locked;
}
void Mutex::ReaderLock() {
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*), "_ZN4absl@5Mutex10ReaderLockEv")(this);
  Acquire(this);
}
void Mutex::ReaderUnlock() {
  Release(this);
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*), "_ZN4absl@5Mutex12ReaderUnlockEv")(this);
}
bool Mutex::ReaderTryLock() {
  InMutexOp op(this);
  const bool locked = LINSERVE_REAL(bool (*)(Mutex*), "_ZN4absl@5Mutex13ReaderTryLockEv")(this);
  if (locked) Acquire(this);
  return locked;
}
void Mutex::LockWhen(const Condition& cond) {
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl@5Mutex8LockWhenERKNS0_9ConditionE")
  (this, cond);
  Acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*, const Condition&),
                "_ZN4absl@5Mutex14ReaderLockWhenERKNS0_9ConditionE")
  (this, cond);
  Acquire(this);
}
// The *With{Timeout,Deadline} forms hold the mutex on return whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(
      bool (*)(Mutex*, const Condition&, Duration),
      "_ZN4absl@5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE")(this, cond, timeout);
  Acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "_ZN4absl@5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE")(this, cond, deadline);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(bool (*)(Mutex*, const Condition&, Duration),
                                 "_ZN4absl@5Mutex25ReaderLockWhenWithTimeoutERKNS0_"
                                 "9ConditionENS0_8DurationE")(this, cond, timeout);
  Acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(bool (*)(Mutex*, const Condition&, Time),
                                 "_ZN4absl@5Mutex26ReaderLockWhenWithDeadlineERKNS0_"
                                 "9ConditionENS0_4TimeE")(this, cond, deadline);
  Acquire(this);
  return met;
}
// Await releases the mutex while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  Release(this);
  InMutexOp op(this);
  LINSERVE_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl@5Mutex5AwaitERKNS0_9ConditionE")
  (this, cond);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  Release(this);
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(
      bool (*)(Mutex*, const Condition&, Duration),
      "_ZN4absl@5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE")(this, cond, timeout);
  Acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  Release(this);
  InMutexOp op(this);
  const bool met = LINSERVE_REAL(bool (*)(Mutex*, const Condition&, Time),
                                 "_ZN4absl@5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE")(
      this, cond, deadline);
  Acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  Release(mu);
  InMutexOp op(mu);
  LINSERVE_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl@7CondVar4WaitEPNS0_5MutexE")
  (this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  Release(mu);
  InMutexOp op(mu);
  const bool timed_out = LINSERVE_REAL(
      bool (*)(CondVar*, Mutex*, Duration),
      "_ZN4absl@7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE")(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  Release(mu);
  InMutexOp op(mu);
  const bool timed_out = LINSERVE_REAL(
      bool (*)(CondVar*, Mutex*, Time),
      "_ZN4absl@7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE")(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

bool Condition::Eval() const {
  const Mutex* mu = tls_mutex;
  if (mu != nullptr) Acquire(mu);
  const bool result =
      LINSERVE_REAL(bool (*)(const Condition*), "_ZNK4absl@9Condition4EvalEv")(this);
  if (mu != nullptr) Release(mu);
  return result;
}

// HasBeenNotified() is inline: an acquire load of the flag that TSan sees in our code. Releasing at
// the flag's address (it follows the Mutex) pairs with that load as well as with the waits.
namespace {
const void* NotifiedFlag(const Notification* n) {
  static_assert(sizeof(Notification) == 2 * sizeof(Mutex), "Notification's layout changed");
  return reinterpret_cast<const char*>(n) + sizeof(Mutex);
}
}  // namespace
void Notification::Notify() {
  Release(this);
  Release(NotifiedFlag(this));
  LINSERVE_REAL(void (*)(Notification*), "_ZN4absl@12Notification6NotifyEv")
  (this);
}
void Notification::WaitForNotification() const {
  LINSERVE_REAL(void (*)(const Notification*), "_ZNK4absl@12Notification19WaitForNotificationEv")
  (this);
  Acquire(this);
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  const bool notified =
      LINSERVE_REAL(bool (*)(const Notification*, Duration),
                    "_ZNK4absl@12Notification30WaitForNotificationWithTimeoutENS0_"
                    "8DurationE")(this, timeout);
  if (notified) Acquire(this);
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  const bool notified = LINSERVE_REAL(
      bool (*)(const Notification*, Time),
      "_ZNK4absl@12Notification31WaitForNotificationWithDeadlineENS0_4TimeE")(this, deadline);
  if (notified) Acquire(this);
  return notified;
}

bool BlockingCounter::DecrementCount() {
  Release(this);
  const bool zero = LINSERVE_REAL(bool (*)(BlockingCounter*),
                                  "_ZN4absl@15BlockingCounter14DecrementCountEv")(this);
  Acquire(this);
  return zero;
}
void BlockingCounter::Wait() {
  LINSERVE_REAL(void (*)(BlockingCounter*), "_ZN4absl@15BlockingCounter4WaitEv")
  (this);
  Acquire(this);
}

bool Barrier::Block() {
  Release(this);
  const bool last = LINSERVE_REAL(bool (*)(Barrier*), "_ZN4absl@7Barrier5BlockEv")(this);
  Acquire(this);
  return last;
}

// absl::Status shares its heap-allocated payload between copies through a reference count that
// libabsl_status.so decrements (acquire-release) where TSan cannot see it: the thread that drops
// the last reference and frees the payload would race with every other thread that read it.
// UnrefNonInlined is private; it is defined here only to forward and annotate.
void Status::UnrefNonInlined(uintptr_t rep) {
  // Each unref releases; the one that frees must first acquire them all. Which one frees is
  // decided inside, so every unref acquires before it decrements.
  Release(reinterpret_cast<const void*>(rep));
  Acquire(reinterpret_cast<const void*>(rep));
  LINSERVE_REAL(void (*)(uintptr_t), "_ZN4absl@6Status15UnrefNonInlinedEm")(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl

namespace {

// absl::StrError (behind absl::ErrnoToStatus, so behind every file error of ours) keeps its
// table of messages in a function-local static of libabsl_strerror.so: the first call builds it,
// and later callers on other threads are ordered after that by a guard check TSan cannot see (two
// engines reading missing session files at once were reported). Building it here, during static
// initialisation before any thread starts, orders every later call after it.
const bool kStrErrorTableBuilt = !absl::base_internal::StrError(0).empty();

}  // namespace
