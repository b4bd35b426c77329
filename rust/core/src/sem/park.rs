//! Parking of blocked cores and the kernel's failure state.
//!
//! Protocol (no lost wake-up): a waker publishes its change (counter add,
//! task push, failure flag) and then reads `waiters` with an RMW; a parker
//! takes its mutex, increments `waiters` and re-checks its condition before
//! sleeping on the condvar. Both RMWs are ordered in `waiters`' modification
//! order: either the waker's comes second and sees `waiters > 0`, then
//! takes and releases the mutex (which the parker only releases inside
//! `Condvar::wait`, so the parker is then waiting) and notifies, or it comes
//! first and the parker's RMW synchronizes with it, so the parker's re-check
//! sees the change.
//!
//! A waker holding the mutex may skip the notify (the futex wake-up, a
//! context switch and an inter-processor interrupt) when it cannot matter:
//! * `notified`: every sleeping thread has been notified since it began to
//!   sleep and has not yet re-taken the mutex; it re-checks after it does,
//!   i.e. after this waker's change.
//! * the only thread parked here waits on another semaphore: a change to
//!   this one cannot make it ready (ring kernels let a device run steps
//!   ahead of its right neighbour, whose every DMA start would otherwise
//!   wake it).

use crate::error::RtError;
use crate::sync::{lock, AtomicBool, AtomicU32, Condvar, IgnorePoison, Mutex, MutexGuard, Ordering};
use std::time::Instant;

/// What a parked core waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitRecord {
    pub sem: u32,
    pub value: i64,
}

#[derive(Default)]
pub(crate) struct ParkState {
    /// The record of the last thread that went to sleep here, while it
    /// sleeps (cleared when a sleeper wakes).
    pub waiting_on: Option<WaitRecord>,
    /// Every sleeping thread has been notified (cleared when one starts to
    /// sleep).
    notified: bool,
}

/// One per global core.
pub(crate) struct Parker {
    waiters: AtomicU32,
    state: Mutex<ParkState>,
    cv: Condvar,
}

impl Parker {
    pub fn new() -> Self {
        Parker { waiters: AtomicU32::new(0), state: Mutex::new(ParkState::default()), cv: Condvar::new() }
    }

    /// Wakes the threads parked here, if any, for a change to semaphore
    /// `sem` (`None`: a change any waiter must see, e.g. a failure). Call
    /// after publishing the change.
    #[inline]
    pub fn wake(&self, sem: Option<u32>) {
        // An RMW, not a load: it reads the latest `waiters` in modification
        // order, and if it comes before the parker's increment the parker's
        // RMW acquires it and so sees the change. This needs no store-load
        // SeqCst ordering (which loom does not model).
        if self.waiters.fetch_add(0, Ordering::SeqCst) > 0 {
            self.wake_slow(sem);
        }
    }

    #[inline(never)]
    fn wake_slow(&self, sem: Option<u32>) {
        // Under the lock a parker is either sleeping or not yet re-checking
        // (it holds the lock from its increment until `Condvar::wait`
        // releases it); `waiters` changes only under the lock, so it counts
        // exactly the threads between those points.
        let mut st = lock(&self.state);
        let other_sem = match (sem, st.waiting_on) {
            (Some(s), Some(w)) => w.sem != s && self.waiters.load(Ordering::SeqCst) == 1,
            _ => false,
        };
        if st.notified || other_sem {
            return;
        }
        st.notified = true;
        // Notifying after releasing the lock spares the woken thread from
        // blocking at once on the lock the waker still holds (a second
        // sleep and wake-up per hand-off).
        drop(st);
        self.cv.notify_all();
    }

    /// Sleeps until woken or `deadline`, unless `ready()` already holds once
    /// this thread is announced as a waiter. Returns true if the deadline
    /// passed. `parked()` runs (with this parker's lock held) right before
    /// the thread sleeps; if it reports a deadlock the thread does not sleep
    /// and the error is returned. `unparked()` runs right after it wakes.
    pub fn park(
        &self,
        record: WaitRecord,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
        parked: impl FnOnce() -> Option<RtError>,
        unparked: impl FnOnce(),
    ) -> Result<bool, RtError> {
        let mut guard = lock(&self.state);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut timed_out = false;
        if !ready() {
            guard.waiting_on = Some(record);
            if let Some(deadlock) = parked() {
                guard.waiting_on = None;
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                return Err(deadlock);
            }
            guard.notified = false;
            let (g, t) = self.sleep(guard, deadline);
            guard = g;
            timed_out = t;
            guard.waiting_on = None;
            unparked();
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        Ok(timed_out)
    }

    #[cfg(not(loom))]
    fn sleep<'a>(
        &self,
        guard: MutexGuard<'a, ParkState>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, ParkState>, bool) {
        match deadline {
            None => (self.cv.wait(guard).ignore_poison(), false),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (guard, true);
                }
                let (g, _) = self.cv.wait_timeout(guard, left).ignore_poison();
                (g, Instant::now() >= d)
            }
        }
    }

    // loom cannot model time: sleep until notified.
    #[cfg(loom)]
    fn sleep<'a>(
        &self,
        guard: MutexGuard<'a, ParkState>,
        _deadline: Option<Instant>,
    ) -> (MutexGuard<'a, ParkState>, bool) {
        (self.cv.wait(guard).ignore_poison(), false)
    }

    /// What this core is parked on, if it is parked.
    #[cfg(any(test, feature = "internals", loom))] // tests only
    pub fn waiting_on(&self) -> Option<WaitRecord> {
        lock(&self.state).waiting_on
    }
}

/// The first error of the kernel, and a flag readable without a lock.
pub(crate) struct Failure {
    flag: AtomicBool,
    first: Mutex<Option<RtError>>,
}

impl Failure {
    pub fn new() -> Self {
        Failure { flag: AtomicBool::new(false), first: Mutex::new(None) }
    }

    #[inline]
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Records the root cause of `err` unless an error is recorded already;
    /// returns the recorded one. The caller wakes everyone afterwards.
    pub fn record(&self, err: RtError) -> RtError {
        let mut first = lock(&self.first);
        let root = first.get_or_insert_with(|| err.root_cause().clone()).clone();
        self.flag.store(true, Ordering::SeqCst);
        root
    }

    pub fn get(&self) -> Option<RtError> {
        if !self.is_set() {
            return None;
        }
        lock(&self.first).clone()
    }
}
