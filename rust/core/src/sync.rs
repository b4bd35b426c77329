//! Synchronization primitives: std normally, loom's models under `--cfg loom`
//! so the signal/wait/park protocol and the DMA state machine can be
//! model-checked with the very code that runs in production.

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

/// Locks a mutex, ignoring poisoning: a panic in one handler is turned into
/// an error at the FFI boundary and must not wedge every other core.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
