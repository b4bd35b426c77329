//! Semaphores: allocate, barrier semaphore, signal, wait, read.

use super::{core_target, device_target};
use crate::dispatch::Call;
use crate::launch;
use crate::wire::{
    allocate_semaphores as alloc, barrier_semaphore as barrier, semaphore_read as read, semaphore_signal as signal,
    semaphore_wait as wait,
};
use mosaic_rt_core::{Result, RtError, SemKind};

/// A non-negative int32 operand used as a count.
fn count_arg(c: &Call, i: usize, what: &str) -> Result<i64> {
    let v = c.frame.arg_i32(i)?;
    if v < 0 {
        return Err(RtError::value(format!("{what} must be >= 0, got {v}")));
    }
    Ok(v as i64)
}

/// `allocate_semaphores(token, handle, device, core) -> (token, int32 first_id)`;
/// `core` = -1 allocates on every core of the device; attributes `kind`
/// ("regular" | "dma" | "barrier") and `count`.
pub fn allocate_semaphores(c: &mut Call) -> Result<()> {
    let (handle, device) = device_target(c, alloc::arg::FIXED..=alloc::arg::FIXED, 2)?;
    let _site = c.enter_site();
    let core = c.frame.arg_opt_id(alloc::arg::core, "core id")?;
    let kind: SemKind = c.frame.attr_str(alloc::attr::kind)?.parse()?;
    let count = c.frame.attr_u32(alloc::attr::count)?;
    let first = launch::with_runtime(handle, |rt| rt.allocate_semaphores(device, core, kind, count))?;
    c.frame.ret(1)?.write_i32(first as i32)
}

/// `barrier_semaphore(token, handle, device) -> (token, int32 id)`;
/// attribute `collective_id`.
pub fn barrier_semaphore(c: &mut Call) -> Result<()> {
    let (handle, device) = device_target(c, barrier::arg::FIXED..=barrier::arg::FIXED, 2)?;
    let cid = c.frame.attr_u32(barrier::attr::collective_id)?;
    let id = launch::with_runtime(handle, |rt| rt.barrier_semaphore(device, cid))?;
    c.frame.ret(1)?.write_i32(id as i32)
}

/// `semaphore_signal(token, handle, device, core, sem, inc, target_device,
/// target_core) -> token`. Static attributes `has_target_device` /
/// `has_target_core` (0 or 1) say whether each target is given; then any
/// value is range-checked. Without them (older callers) -1 means not
/// given. No target device = the signalling device, no target core = core
/// 0 (stock's rule).
pub fn semaphore_signal(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, signal::arg::FIXED..=signal::arg::FIXED, 1)?;
    let f = &c.frame;
    let sem = f.arg_id(signal::arg::sem, "semaphore id")?;
    let inc = f.arg_i32(signal::arg::inc)? as i64;
    let [has_device, has_core, wrap] =
        f.attrs_i64_opt([signal::attr::has_target_device, signal::attr::has_target_core, signal::attr::wrap_negative]);
    let (target_device, target_core) = if wrap == Some(1) {
        wrapped_target(f, handle)?
    } else {
        (
            super::target_arg(f, handle, signal::arg::target_device, has_device, "target device id")?,
            super::target_arg(f, handle, signal::arg::target_core, has_core, "target core id")?,
        )
    };
    launch::with_runtime(handle, |rt| rt.semaphore_signal(device, core, sem, inc, target_device, target_core))
}

/// With attribute `wrap_negative`: the target (device, core) of operands 6
/// and 7, both given, after stock's wrap of a negative id
/// ([`mosaic_rt_core::Topology::wrap_negative`]) -- done here instead of
/// by a `wrap_target` call of its own before the signal.
fn wrapped_target(f: &crate::frame::Frame, handle: u64) -> Result<(Option<u32>, Option<u32>)> {
    let topo = launch::with_runtime(handle, |rt| Ok(rt.topology()))?;
    let (d, k) =
        topo.wrap_negative(f.arg_i32(signal::arg::target_device)?.into(), f.arg_i32(signal::arg::target_core)?.into());
    Ok((Some(super::target_id(handle, d, "target device id")?), Some(super::target_id(handle, k, "target core id")?)))
}

/// `semaphore_wait(token, handle, device, core, sem, value) -> token`.
/// Optional attribute `decrement` (default 1): 0 leaves the count as it is
/// once it reaches `value` (`pl.semaphore_wait(..., decrement=False)`).
pub fn semaphore_wait(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, wait::arg::FIXED..=wait::arg::FIXED, 1)?;
    let sem = c.frame.arg_id(wait::arg::sem, "semaphore id")?;
    let value = count_arg(c, wait::arg::value, "semaphore wait value")?;
    let decrement = match c.frame.attr_i64_opt(wait::attr::decrement)? {
        None | Some(1) => true,
        Some(0) => false,
        Some(v) => return Err(RtError::value(format!("semaphore_wait: attribute decrement must be 0 or 1, got {v}"))),
    };
    let site = c.site();
    if decrement {
        launch::with_runtime(handle, |rt| rt.semaphore_wait_at(device, core, sem, value, site))
    } else {
        launch::with_runtime(handle, |rt| rt.semaphore_wait_no_decrement_at(device, core, sem, value, site))
    }
}

/// `semaphore_read(token, handle, device, core, sem) -> (token, int32 count)`.
/// Optional attribute `take` (default 0): 1 runs the DMAs queued on the
/// semaphore first and leaves its count 0 (`Runtime::semaphore_take`: a
/// semaphore the kernel returns).
pub fn semaphore_read(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, read::arg::FIXED..=read::arg::FIXED, 2)?;
    let sem = c.frame.arg_id(read::arg::sem, "semaphore id")?;
    let take = match c.frame.attr_i64_opt(read::attr::take)? {
        None | Some(0) => false,
        Some(1) => true,
        Some(v) => return Err(RtError::value(format!("semaphore_read: attribute take must be 0 or 1, got {v}"))),
    };
    let v = if take {
        let _site = c.enter_site();
        launch::with_runtime(handle, |rt| rt.semaphore_take(device, core, sem))?
    } else {
        launch::with_runtime(handle, |rt| rt.semaphore_read(device, core, sem))?
    };
    let v = i32::try_from(v).map_err(|_| RtError::value(format!("semaphore {sem} count {v} does not fit int32")))?;
    c.frame.ret(1)?.write_i32(v)
}
