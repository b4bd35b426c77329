//! Pure ops on ids (no token, handle or side effect): stock's wrap of a
//! negative signal target (the runtime's `Topology::wrap_negative`, so
//! the rule has one home) and the consecutive ids of a semaphore array
//! (one call instead of an XLA arange-and-add kernel).

use crate::dispatch::Call;
use crate::wire::{iota_ids, wrap_target as wrap};
use mosaic_rt_core::{DType, Result, Topology};

/// `wrap_target(device, core) -> (device, core)` (pure: no token, handle or
/// side effect): stock's wrap of a negative signal target. Stock indexes its
/// per-core tables with the global core id `device * num_cores + core`, so
/// a negative id that is still >= `-num_devices * num_cores` wraps once
/// (device -1 is the last device; core -1 of device 0 the last core of the
/// last device). Other ids pass unchanged, for the signal's own range check
/// to name. Attributes `num_devices`, `num_cores`.
pub fn wrap_target(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    f.expect_arity(wrap::arg::FIXED..=wrap::arg::FIXED, 2)?;
    let topo = Topology {
        num_devices: u32::try_from(f.attr_i64(wrap::attr::num_devices)?.max(1)).unwrap_or(u32::MAX),
        cores_per_device: u32::try_from(f.attr_i64(wrap::attr::num_cores)?.max(1)).unwrap_or(u32::MAX),
    };
    let (d, k) = topo.wrap_negative(f.arg_i32(wrap::arg::device)?.into(), f.arg_i32(wrap::arg::core)?.into());
    f.ret(0)?.write_i32(d as i32)?;
    f.ret(1)?.write_i32(k as i32)
}

/// `iota_ids(first) -> int32[shape]` (pure): `first + 0, first + 1, ...` in
/// C order, the ids of a semaphore array allocated as one consecutive run
/// (no XLA kernel for the arange-and-add).
pub fn iota_ids(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    f.expect_arity(iota_ids::arg::FIXED..=iota_ids::arg::FIXED, 1)?;
    let first = f.arg_i32(iota_ids::arg::first)?;
    write_ids(&f.ret(0)?, first)
}

/// Fills int32 result `out` with `first + 0, first + 1, ...` (C order).
pub fn write_ids(out: &crate::frame::Buf<'_>, first: i32) -> Result<()> {
    out.expect_dtype(DType::I32)?;
    // SAFETY: called once per result buffer, whose only slice this is; no
    // operand slice overlaps it (results alias no operand but the token).
    let bytes = unsafe { out.bytes_mut()? };
    for (k, chunk) in bytes.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&first.wrapping_add(k as i32).to_ne_bytes());
    }
    Ok(())
}
