//! Finding the runtime of a launch from its handle, and ending launches.
//!
//! Handles are `u64`s handed to XLA as a `uint32[2]` array (x64 is off in
//! jax, so no 64-bit operands). Every op looks its runtime up through a
//! per-thread cache first: a device's program runs on one XLA thread, so the
//! cache hits on nearly every call, and the shared registry is not touched
//! on the hot path (the runtime's reference count is, once per call: see
//! `CACHE`; a `batch` call's members share one lookup: see `BatchScope`).

use mosaic_rt_core::{Config, LaunchRegistry, Result, RtError, Runtime};
use std::cell::{Cell, RefCell};
use std::sync::{Arc, OnceLock, Weak};

pub fn registry() -> &'static LaunchRegistry {
    static REGISTRY: OnceLock<LaunchRegistry> = OnceLock::new();
    REGISTRY.get_or_init(LaunchRegistry::new)
}

thread_local! {
    /// The launch this thread last ran an op of. Never an owner (a `Weak`,
    /// upgraded per op): XLA also runs handlers on its pool threads (the
    /// thunk executor hands ready work to its workers, ~100 of them on the
    /// private client of `cores.py`), and a worker that runs no op of ours
    /// again never drops what it caches. A strong cache there kept every
    /// finished launch's runtime -- its whole simulated memory, a copy of
    /// its inputs included -- alive: one input's worth of memory leaked per
    /// launch of a SparseCore kernel (tpu-inference's ragged gather-reduce,
    /// 224 MiB per launch, killed for memory after ~80). The registry alone
    /// owns a launch's runtime, so it is freed when the last device leaves.
    static CACHE: RefCell<Option<(u64, Weak<Runtime>)>> = const { RefCell::new(None) };
}

pub fn split_handle(h: u64) -> [u32; 2] {
    [h as u32, (h >> 32) as u32]
}

pub fn join_handle(parts: [u32; 2]) -> u64 {
    parts[0] as u64 | ((parts[1] as u64) << 32)
}

fn unknown_handle(handle: u64) -> RtError {
    RtError::value(format!(
        "unknown kernel launch handle {handle}: the launch has ended or was never begun \
         (every op must run between kernel_begin and kernel_end)"
    ))
}

/// The runtime of `handle` from the registry (a cache miss). A launch that
/// failed and was freed reports its root cause.
#[cold]
#[inline(never)]
fn lookup(handle: u64) -> Result<Arc<Runtime>> {
    match registry().get(handle) {
        Some(rt) => Ok(rt),
        None => Err(match registry().tombstone(handle) {
            Some(root) => root,
            None => unknown_handle(handle),
        }),
    }
}

/// Runs `f` on the runtime of `handle`.
pub fn with_runtime<R>(handle: u64, f: impl FnOnce(&Runtime) -> Result<R>) -> Result<R> {
    let pinned = BATCH.with(|b| b.pinned(handle));
    if !pinned.is_null() {
        // SAFETY: `BatchScope::rt` is the runtime `BatchScope::owner` holds
        // a strong reference to; it is only dropped when the batch ends
        // (`BatchGuard::drop`), after every member returned.
        return f(unsafe { &*pinned });
    }
    let rt = cached_or_lookup(handle)?;
    BATCH.with(|b| b.offer(handle, &rt));
    f(&rt)
}

fn cached_or_lookup(handle: u64) -> Result<Arc<Runtime>> {
    let cached = CACHE.with(|cell| match &*cell.borrow() {
        Some((h, rt)) if *h == handle => rt.upgrade(),
        _ => None,
    });
    let rt = match cached {
        Some(rt) => rt,
        None => {
            // A miss, or the cached launch has ended (its late op fails below).
            let rt = lookup(handle);
            CACHE.with(|cell| *cell.borrow_mut() = rt.as_ref().ok().map(|rt| (handle, Arc::downgrade(rt))));
            rt?
        }
    };
    Ok(rt)
}

/// The runtime a `batch`'s members run on, held for the batch: a batch
/// runs hundreds of ops of one launch, and upgrading the cached `Weak` per
/// op is two atomic updates of a count every device's thread shares.
struct BatchScope {
    active: Cell<bool>,
    handle: Cell<u64>,
    /// `owner`'s runtime, or null.
    rt: Cell<*const Runtime>,
    owner: RefCell<Option<Arc<Runtime>>>,
}

impl BatchScope {
    #[inline]
    fn pinned(&self, handle: u64) -> *const Runtime {
        if self.handle.get() == handle {
            self.rt.get()
        } else {
            std::ptr::null()
        }
    }

    /// Holds `rt` (the runtime of `handle`) until the batch ends, if a
    /// batch is running and holds none yet.
    fn offer(&self, handle: u64, rt: &Arc<Runtime>) {
        if self.active.get() && self.rt.get().is_null() {
            *self.owner.borrow_mut() = Some(Arc::clone(rt));
            self.handle.set(handle);
            self.rt.set(Arc::as_ptr(rt));
        }
    }
}

thread_local! {
    // Spelled out: `Default` for raw pointers is newer than the crate's
    // minimum Rust (1.85).
    static BATCH: BatchScope = const {
        BatchScope {
            active: Cell::new(false),
            handle: Cell::new(0),
            rt: Cell::new(std::ptr::null()),
            owner: RefCell::new(None),
        }
    };
}

/// While alive, ops on this thread keep the first runtime they look up
/// (see `BatchScope`). A batch never runs inside another.
pub struct BatchGuard(());

pub fn batch_scope() -> BatchGuard {
    BATCH.with(|b| b.active.set(true));
    BatchGuard(())
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        BATCH.with(|b| {
            b.active.set(false);
            b.rt.set(std::ptr::null());
            b.handle.set(0);
            b.owner.borrow_mut().take()
        });
    }
}

/// Forgets the cached runtime of `handle` on this thread (the cache does
/// not keep it alive, but its `Weak` keeps the runtime's own allocation).
pub fn evict(handle: u64) {
    CACHE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_some_and(|(h, _)| *h == handle) {
            *slot = None;
        }
    });
}

/// Joins launch `uid` of XLA run `run_id` as `device`.
pub fn join(uid: u64, run_id: i64, device: u32, config: &Config) -> Result<u64> {
    let (handle, rt) = registry().join(uid, run_id, device, config)?;
    CACHE.with(|cell| *cell.borrow_mut() = Some((handle, Arc::downgrade(&rt))));
    Ok(handle)
}

/// `device` finished the launch normally.
pub fn leave(handle: u64, device: u32) {
    evict(handle);
    registry().leave(handle, device);
}

/// `device`'s program stopped on an error: record `err` as the launch's
/// failure (waking every other core) and return the launch's root cause.
///
/// A launch already failed and freed reports its recorded root cause, not
/// `err`: with several cores per device, the first failing core abandons
/// the device (ending the borrows of its inputs) while its other cores are
/// still inside ops, and their errors are consequences of that failure.
pub fn fail_and_abandon(handle: u64, device: u32, err: RtError) -> RtError {
    evict(handle);
    let root = match registry().get(handle) {
        Some(rt) => {
            let root = rt.fail(err);
            // The timeline of a failed launch is written too (best effort).
            if let Err(e) = crate::trace_files::device_finished(handle, &rt, device) {
                eprintln!("mosaic_rt: {e}");
            }
            root
        }
        None => registry().tombstone(handle).unwrap_or(err),
    };
    registry().abandon(handle, device);
    root.root_cause().clone()
}

/// Fails launch `handle` from outside any op (a user host callback or
/// another non-mosaic_rt failure on (device, core)): records `err` as the
/// root cause unless one is recorded, and wakes every waiter. Returns the
/// launch's root cause; `None` if the launch is unknown (ended) and left no
/// tombstone.
pub fn fail_launch(handle: u64, device: u32, core: u32, err: RtError) -> Result<Option<RtError>> {
    match registry().get(handle) {
        Some(rt) => {
            rt.topology().check(device, core)?;
            let root = rt.fail(err.at(device, core));
            // The device's program stops with this error and XLA may free its
            // operands: nothing may read them afterwards.
            rt.release_borrowed(device);
            Ok(Some(root))
        }
        None => Ok(registry().tombstone(handle)),
    }
}

/// Marks (device, core) of launch `handle` as inside (or out of) a user
/// host callback.
pub fn callback_state(handle: u64, device: u32, core: u32, inside: bool) -> Result<()> {
    match registry().get(handle) {
        Some(rt) => rt.callback_state(device, core, inside),
        None => match registry().tombstone(handle) {
            Some(_) => Ok(()), // the launch failed already: nothing to mark
            None => Err(unknown_handle(handle)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// XLA runs handlers on pool threads too; one that ran an op of a
    /// launch and then idles must not keep the launch's runtime (and its
    /// memory) alive after the launch ends.
    #[test]
    fn an_idle_thread_that_ran_an_op_does_not_keep_an_ended_launch_alive() {
        let config = Config { num_devices: 1, ..Config::default() };
        let handle = join(0x1ea4_c0de, 1, 0, &config).expect("join");
        let rt = Arc::downgrade(&registry().get(handle).expect("live launch"));
        let (ran, ran_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            with_runtime(handle, |_| Ok(())).expect("op of a live launch");
            ran.send(()).unwrap();
            go_rx.recv().unwrap();
            // A late op of the ended launch: an error, not the old runtime.
            with_runtime(handle, |_| Ok(())).expect_err("the launch has ended").message
        });
        ran_rx.recv().unwrap();
        leave(handle, 0);
        assert_eq!(rt.strong_count(), 0, "the idle thread's cache kept the ended launch's runtime");
        go.send(()).unwrap();
        let late = worker.join().unwrap();
        assert!(late.contains("unknown kernel launch handle"), "{late}");
    }

    /// A core still inside an op when another core's failure freed the
    /// launch (a late read of a released input, say) reports the launch's
    /// root cause, not its own consequence of it.
    #[test]
    fn a_late_failure_of_a_freed_launch_reports_the_first_failure() {
        let config = Config { num_devices: 1, ..Config::default() };
        let handle = join(0x1ea4_c0df, 1, 0, &config).expect("join");
        let first = RtError::value("the first core's failure").at(0, 2);
        let root = fail_and_abandon(handle, 0, first.clone());
        assert_eq!(root.message, first.message);
        assert!(registry().get(handle).is_none(), "the failed launch was freed");
        let late = fail_and_abandon(handle, 0, RtError::internal("read after its device left the launch"));
        assert_eq!(late.message, first.message, "{late}");
    }
}
