//! Synchronization primitives: std normally, loom's models under `--cfg loom`
//! so the signal/wait/park protocol and the DMA state machine can be
//! model-checked with the very code that runs in production.
//!
//! Also the one place that decides what a poisoned lock means (see
//! [`IgnorePoison`]); every lock of mosaic_rt goes through it.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
#[cfg(loom)]
pub use loom::thread::yield_now;

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub use std::thread::yield_now;

/// Poisoning is ignored: a panic in one handler is turned into an error at
/// the FFI boundary and must not wedge every other core. Applies to the
/// result of any lock operation -- `Mutex::lock`, `RwLock::read` / `write`,
/// `Condvar::wait` / `wait_timeout` -- of std's locks and of loom's (both
/// return std's `LockResult`).
pub trait IgnorePoison<G> {
    /// The guard, whether or not the lock was poisoned.
    fn ignore_poison(self) -> G;
}

impl<G> IgnorePoison<G> for std::sync::LockResult<G> {
    #[inline]
    fn ignore_poison(self) -> G {
        self.unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Locks a mutex of this module, ignoring poisoning (see [`IgnorePoison`]).
#[inline]
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().ignore_poison()
}
