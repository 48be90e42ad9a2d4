// File: absl_sync_annotations.cc
//
// ThreadSanitizer builds only (--config=tsan): tells TSan about the
// happens-before edges of Debian's abseil synchronization.
//
// Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so
// TSan sees none of absl::Mutex's synchronization: every field guarded by an
// absl::Mutex and touched by two threads is reported as a race, although the
// lock orders the accesses (and gRPC 1.51's own locks are absl::Mutex too).
// A suppression cannot tell those reports from real ones, since they are in
// our own code. Instead this file interposes the out-of-line entry points of
// absl::Mutex, absl::CondVar and absl::Notification: the executable's
// definition wins over the shared library's for every caller (our code, gRPC,
// and abseil's own calls, which go through the PLT); each wrapper calls the
// library's function (found with dlsym(RTLD_NEXT)) and adds the edge TSan
// cannot see with __tsan_release / __tsan_acquire on the mutex's address:
// release before a lock is given up (Unlock, Await, CondVar::Wait), acquire
// once it is held again, and acquire before a Condition is evaluated (abseil
// may evaluate it on the unlocking thread). Notification also releases on the
// address of its flag, which the inline HasBeenNotified() reads with an
// (instrumented) acquire load.
//
// This models only happens-before, not lock ownership: TSan finds unordered
// accesses through these locks as it would with an instrumented abseil, but
// its lock-order (deadlock) checks do not see them.
//
// Linked into every binary (through @system//:absl) only under --config=tsan;
// compiles to nothing without -fsanitize=thread.

#if defined(__SANITIZE_THREAD__)

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define DOWNPOUR_TSAN_STR2(x) #x
#define DOWNPOUR_TSAN_STR(x) DOWNPOUR_TSAN_STR2(x)

// The library's definition of the member function whose Itanium-mangled name
// is prefix ("_ZN", or "_ZNK" for a const member) + "4absl" + the inline
// namespace + tail. Aborts when it is missing: a TSan build against another
// abseil must fail loudly, not pass without seeing the locks.
void* Real(const char* prefix, const char* tail) {
  const char* ns = DOWNPOUR_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  std::string name = std::string(prefix) + "4absl" +
                     std::to_string(std::strlen(ns)) + ns + tail;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr,
                 "tsan absl annotations: %s not found in the abseil shared "
                 "library (%s); rebuild third_party/tsan for this abseil\n",
                 name.c_str(), dlerror());
    std::abort();
  }
  return fn;
}

// Resolves once; concurrent first calls may both look it up (same result).
template <typename Fn>
Fn Lookup(std::atomic<void*>& slot, const char* prefix, const char* tail) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = Real(prefix, tail);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

#define DOWNPOUR_REAL_(prefix, type, tail)      \
  static std::atomic<void*> real_slot{nullptr}; \
  const auto real = Lookup<type>(real_slot, prefix, tail)
#define DOWNPOUR_REAL(type, tail) DOWNPOUR_REAL_("_ZN", type, tail)
#define DOWNPOUR_REAL_CONST(type, tail) DOWNPOUR_REAL_("_ZNK", type, tail)

// Wraps a waiter's Condition for abseil. abseil evaluates it under the lock,
// on the waiting thread or on a thread that is unlocking, so the evaluation
// first acquires what the waiter released after building both conditions
// (the user's Condition and its captures live on the waiter's stack and are
// read by instrumented code on the other thread), then the mutex's clock; it
// releases again when done, and the waiter acquires that before its stack
// frame is reused (the destructor), and releases the mutex's clock, since an
// unlocking thread evaluates after its own release of the mutex. `outer` uses abseil's out-of-line void*
// constructor, so that abseil reads it in uninstrumented code only.
class AcquiringCondition {
 public:
  AcquiringCondition(absl::Mutex* mu, const absl::Condition& cond)
      : mu_(mu), cond_(&cond), outer_(&AcquiringCondition::Eval, this) {
    __tsan_release(this);
  }
  ~AcquiringCondition() { __tsan_acquire(this); }
  const absl::Condition& get() const { return outer_; }

 private:
  static bool Eval(void* arg) {
    __tsan_acquire(arg);
    auto* self = static_cast<AcquiringCondition*>(arg);
    __tsan_acquire(self->mu_);
    const bool result = self->cond_->Eval();
    // What it read is ordered before the next holder of the mutex (when an
    // unlocking thread evaluates, its own release came before) and before
    // the waiter's return.
    __tsan_release(self->mu_);
    __tsan_release(arg);
    return result;
  }

  absl::Mutex* const mu_;
  const absl::Condition* const cond_;
  const absl::Condition outer_;
};

void* NotifiedFlag(absl::Notification* n) {
  // Notification is { Mutex mutex_; std::atomic<bool> notified_yet_; }.
  struct Layout {
    absl::Mutex mutex;
    std::atomic<bool> notified;
  };
  static_assert(sizeof(Layout) == sizeof(absl::Notification),
                "absl::Notification's layout changed");
  return reinterpret_cast<char*>(n) + offsetof(Layout, notified);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  DOWNPOUR_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  DOWNPOUR_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  DOWNPOUR_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  DOWNPOUR_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  DOWNPOUR_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  DOWNPOUR_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  DOWNPOUR_REAL(void (*)(Mutex*, const Condition&),
                "5Mutex8LockWhenERKNS0_9ConditionE");
  AcquiringCondition wrapped(this, cond);
  real(this, wrapped.get());
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  DOWNPOUR_REAL(void (*)(Mutex*, const Condition&),
                "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  AcquiringCondition wrapped(this, cond);
  real(this, wrapped.get());
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  DOWNPOUR_REAL(bool (*)(Mutex*, const Condition&, Duration),
                "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AcquiringCondition wrapped(this, cond);
  const bool ok =
      real(this, wrapped.get(), timeout);
  __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond,
                                      Duration timeout) {
  DOWNPOUR_REAL(
      bool (*)(Mutex*, const Condition&, Duration),
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AcquiringCondition wrapped(this, cond);
  const bool ok =
      real(this, wrapped.get(), timeout);
  __tsan_acquire(this);
  return ok;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  DOWNPOUR_REAL(bool (*)(Mutex*, const Condition&, Time),
                "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AcquiringCondition wrapped(this, cond);
  const bool ok =
      real(this, wrapped.get(), deadline);
  __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  DOWNPOUR_REAL(
      bool (*)(Mutex*, const Condition&, Time),
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AcquiringCondition wrapped(this, cond);
  const bool ok =
      real(this, wrapped.get(), deadline);
  __tsan_acquire(this);
  return ok;
}

void Mutex::Await(const Condition& cond) {
  DOWNPOUR_REAL(void (*)(Mutex*, const Condition&),
                "5Mutex5AwaitERKNS0_9ConditionE");
  AcquiringCondition wrapped(this, cond);
  __tsan_release(this);
  real(this, wrapped.get());
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  DOWNPOUR_REAL(bool (*)(Mutex*, const Condition&, Duration),
                "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  AcquiringCondition wrapped(this, cond);
  __tsan_release(this);
  const bool ok =
      real(this, wrapped.get(), timeout);
  __tsan_acquire(this);
  return ok;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  DOWNPOUR_REAL(bool (*)(Mutex*, const Condition&, Time),
                "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  AcquiringCondition wrapped(this, cond);
  __tsan_release(this);
  const bool ok =
      real(this, wrapped.get(), deadline);
  __tsan_acquire(this);
  return ok;
}

void CondVar::Wait(Mutex* mu) {
  DOWNPOUR_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  DOWNPOUR_REAL(bool (*)(CondVar*, Mutex*, Duration),
                "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  DOWNPOUR_REAL(bool (*)(CondVar*, Mutex*, Time),
                "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  DOWNPOUR_REAL(void (*)(Notification*), "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  DOWNPOUR_REAL_CONST(void (*)(const Notification*),
                "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  DOWNPOUR_REAL_CONST(bool (*)(const Notification*, Duration),
                "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  DOWNPOUR_REAL_CONST(bool (*)(const Notification*, Time),
                "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl

#endif  // __SANITIZE_THREAD__
