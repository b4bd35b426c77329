//! Finding the runtime of a launch from its handle, and ending launches.
//!
//! Handles are `u64`s handed to XLA as a `uint32[2]` array (x64 is off in
//! jax, so no 64-bit operands). Every op looks its runtime up through a
//! per-thread cache first: a device's program runs on one XLA thread, so the
//! cache hits on every call but the first, and the shared registry (and the
//! runtime's reference count) is not touched on the hot path.

use mosaic_rt_core::{Config, LaunchRegistry, Result, RtError, Runtime};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

pub fn registry() -> &'static LaunchRegistry {
    static REGISTRY: OnceLock<LaunchRegistry> = OnceLock::new();
    REGISTRY.get_or_init(LaunchRegistry::new)
}

thread_local! {
    static CACHE: RefCell<Option<(u64, Arc<Runtime>)>> = const { RefCell::new(None) };
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
    CACHE.with(|cell| {
        {
            let slot = cell.borrow();
            if let Some((h, rt)) = slot.as_ref() {
                if *h == handle {
                    return f(rt);
                }
            }
        }
        let rt = lookup(handle)?;
        *cell.borrow_mut() = Some((handle, rt));
        let slot = cell.borrow();
        f(&slot.as_ref().expect("just filled").1)
    })
}

/// Forgets the cached runtime of `handle` on this thread, so a finished
/// launch is not kept alive by the cache.
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
    CACHE.with(|cell| *cell.borrow_mut() = Some((handle, rt)));
    Ok(handle)
}

/// `device` finished the launch normally.
pub fn leave(handle: u64, device: u32) {
    evict(handle);
    registry().leave(handle, device);
}

/// `device`'s program stopped on an error: record `err` as the launch's
/// failure (waking every other core) and return the launch's root cause.
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
        None => err,
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
