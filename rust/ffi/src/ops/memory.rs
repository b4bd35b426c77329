//! Buffers: allocate, free, load, store, swap.

use super::{core_target, device_target, region, space_attr, tail_len, Tail, REGION};
use crate::dispatch::Call;
use crate::frame::{Buf, Frame};
use crate::launch;
use crate::wire::{allocate_buffer as alloc, free_buffer as free, load as ld, store as st, swap as sw};
use mosaic_rt_core::{DType, Init, MemRef, MemorySpace, Region, Result, RtError, Stored};

fn shape_attr(c: &Call, name: &str) -> Result<Option<Vec<usize>>> {
    let f = &c.frame;
    let Some(dims) = f.attr_i64s_opt(name)? else {
        return Ok(None);
    };
    dims.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| RtError::value(format!("{}: {name} has a negative dimension {d}", f.op)))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// `allocate_buffer(token, handle, device, core[, init]) -> (token, int32 id)`.
/// `core` = -1 allocates on every core of the device. Attributes: `space`,
/// `dtype` (numpy name), `shape`, optional `logical_shape`. Without `init`
/// the buffer gets the fill value; `init` must have the logical shape.
/// Optional attribute `borrow` (non-zero): an HBM buffer on every core,
/// unpadded, of a byte-sized dtype, uses `init`'s memory read-only instead
/// of a copy; the caller must pass `init` to the device's `kernel_end` too.
///
/// Optional attribute `direct` (non-zero) with a result 2 of the buffer's
/// dtype and shape: an HBM output buffer on every core, unpadded, without
/// `init`, whose bytes are that XLA result buffer, written in place (no
/// copy-out at kernel end). The caller must pass result 2 to the device's
/// `kernel_end` as a direct output (aliased to a `kernel_end` result), with
/// no other use: `kernel_end` checks it receives that same memory.
pub fn allocate_buffer(c: &mut Call) -> Result<()> {
    let rets = if c.frame.num_rets() == 3 { 3 } else { 2 };
    let (handle, device) = device_target(c, alloc::arg::FIXED..=alloc::arg::init + 1, rets)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let request = BufferRequest {
        core: f.arg_opt_id(alloc::arg::core, "core id")?,
        space: space_attr(f, alloc::attr::space)?,
        dtype: DType::from_name(f.attr_str(alloc::attr::dtype)?)?,
        shape: shape_attr(c, alloc::attr::shape)?
            .ok_or_else(|| RtError::value("allocate_buffer: missing attribute \"shape\""))?,
        logical: shape_attr(c, alloc::attr::logical_shape)?,
        borrow: borrow_requested(c)?,
    };
    if rets == 3 {
        if f.attr_i64_opt(alloc::attr::direct)?.is_none_or(|v| v == 0) || f.num_args() != alloc::arg::FIXED {
            return Err(RtError::internal("allocate_buffer: a third result needs attribute direct and no init"));
        }
        let id = allocate_direct(handle, device, &request, &f.ret(2)?, None)?;
        return f.ret(1)?.write_i32(id as i32);
    }
    let init = if f.num_args() > alloc::arg::init { Some(f.arg(alloc::arg::init)?) } else { None };
    let id = allocate(handle, device, &request, init.as_ref())?;
    f.ret(1)?.write_i32(id as i32)
}

/// A buffer the interpreter asks for, decoded from `allocate_buffer`'s
/// operands and attributes or from an item of `launch_begin` (see there):
/// the core's `BufferSpec` plus where (`core`) and how (`borrow`).
pub struct BufferRequest {
    pub core: Option<u32>,
    pub space: MemorySpace,
    pub dtype: DType,
    /// The content shape (padded, with `buffer_bounds="padded"`).
    pub shape: Vec<usize>,
    /// The logical shape, when given (else `shape`).
    pub logical: Option<Vec<usize>>,
    /// Borrow `init`'s memory instead of copying it, where possible.
    pub borrow: bool,
}

/// Allocates `request` on `device` with contents `init` (the fill value
/// without), borrowing `init`'s memory when `request.borrow` allows it; the id.
pub fn allocate(handle: u64, device: u32, request: &BufferRequest, init: Option<&Buf<'_>>) -> Result<u32> {
    let BufferRequest { core, space, dtype, ref shape, ref logical, borrow } = *request;
    let logical_shape = logical.as_deref().unwrap_or(shape);
    let init_elements = match init {
        None => None,
        Some(b) => {
            b.expect_dtype(dtype)?;
            if b.dims.iter().map(|&d| d as usize).ne(logical_shape.iter().copied()) {
                return Err(RtError::value(format!(
                    "allocate_buffer: initial value has shape {:?}, expected {:?}",
                    b.dims, logical_shape
                )));
            }
            Some(b.elements()?)
        }
    };
    if let (Some(std::borrow::Cow::Borrowed(bytes)), true) = (&init_elements, borrow) {
        // An empty input has nothing to copy (and no address to check).
        if core.is_none() && space == MemorySpace::Hbm && logical_shape == shape.as_slice() && !bytes.is_empty() {
            // SAFETY: the interpreter passes this operand to the device's
            // `kernel_end` as well (the "borrow" attribute's contract, see
            // `ffi/ops.py`), so XLA keeps it alive and unmodified until that
            // call, which leaves the launch; leaving (or failing) ends the
            // borrow first (`Runtime::leave_device` / `release_borrowed`).
            return launch::with_runtime(handle, |rt| unsafe {
                rt.allocate_borrowed_buffer(device, dtype, shape, bytes)
            });
        }
    }
    let init = match &init_elements {
        None => Init::Fill,
        Some(e) => Init::Bytes(e),
    };
    launch::with_runtime(handle, |rt| {
        rt.allocate_buffer(
            device,
            core,
            mosaic_rt_core::BufferSpec { space, dtype, shape, logical_shape: logical.as_deref(), init },
        )
    })
}

/// Allocates `request` as a direct output: registers `out` (a result buffer
/// of the call) as the buffer's bytes; the id.
///
/// `aliased`: the operand XLA aliases to `out` (an input whose output the
/// kernel writes in place): the buffer starts as its value, already in
/// `out`'s memory, instead of the fill values.
pub fn allocate_direct(
    handle: u64,
    device: u32,
    request: &BufferRequest,
    out: &Buf<'_>,
    aliased: Option<&Buf<'_>>,
) -> Result<u32> {
    let BufferRequest { core, space, dtype, ref shape, ref logical, .. } = *request;
    out.expect_dtype(dtype)?;
    let direct_ok = core.is_none()
        && space == MemorySpace::Hbm
        && logical.as_ref().is_none_or(|l| l == shape)
        && !dtype.is_packed()
        && out.dims.iter().map(|&d| d as usize).eq(shape.iter().copied());
    if !direct_ok {
        return Err(RtError::internal(format!(
            "allocate_buffer: a direct output must be an unpadded HBM buffer on every core of a \
             byte-sized dtype with result 2 of its shape (got {space:?} core {core:?}, shape {shape:?}, \
             logical {logical:?}, {}, result {:?})",
            dtype.name(),
            out.dims
        )));
    }
    let len = out.byte_len()?;
    if let Some(init) = aliased {
        init.expect_dtype(dtype)?;
        if init.dims != out.dims || init.data != out.data {
            return Err(RtError::internal(format!(
                "allocate_buffer: a direct buffer's initial value must be its result's memory (aliased), \
                 got {} of shape {:?} for a result of shape {:?}",
                init.describe(),
                init.dims,
                out.dims
            )));
        }
    }
    // SAFETY: `out` is XLA's buffer for a result of this call, which the
    // interpreter passes on only to the device's `kernel_end` (aliased to a
    // result of it, the attribute's contract, see `ffi/ops.py`): XLA keeps
    // that memory for this value, untouched by anything else, until
    // `kernel_end`, which checks the address and ends the borrow
    // (`finish_direct_outputs`); leaving or failing ends it first otherwise.
    launch::with_runtime(handle, |rt| unsafe {
        rt.allocate_direct_output(device, dtype, shape, out.data as *mut u8, len, aliased.is_some())
    })
}

/// The region of a load / store / swap (attributes without a prefix, start
/// operand `slot`) and its `t` trailing start operands.
fn tail_region(f: &Frame, slot: usize, t: usize) -> Result<Region> {
    let mut tail = Tail::of(f, t);
    let region = region(f, &REGION, slot, &mut tail)?;
    tail.finish(f)?;
    Ok(region)
}

/// Whether the optional `borrow` attribute asks for a borrowed input.
fn borrow_requested(c: &Call) -> Result<bool> {
    Ok(c.frame.attr_i64_opt(alloc::attr::borrow)?.is_some_and(|v| v != 0))
}

/// `free_buffer(token, handle, device, core, id) -> token`; attribute `space`.
pub fn free_buffer(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, free::arg::FIXED..=free::arg::FIXED, 1)?;
    let _site = c.enter_site();
    let id = c.frame.arg_id(free::arg::buffer_id, "buffer id")?;
    let space = space_attr(&c.frame, free::attr::space)?;
    launch::with_runtime(handle, |rt| rt.free_buffer(device, core, space, id))
}

/// `load(token, handle, device, core, id, starts[, mask]) -> (token, value)`;
/// attributes `space`, `sizes`, `strides`, `squeezed`. `mask`: a bool array
/// of the value's shape; a masked load reads only the selected elements
/// (masked-off ones get the fill value and may lie out of bounds).
/// Load, store and swap may end with their region's trailing starts
/// (attribute `tail_starts`, see [`super::region`]).
pub fn load(c: &mut Call) -> Result<()> {
    let t = tail_len(&c.frame);
    let (handle, device, core) = core_target(c, ld::arg::FIXED + t..=ld::arg::mask + 1 + t, 2)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let id = f.arg_id(ld::arg::buffer_id, "buffer id")?;
    let space = space_attr(f, ld::attr::space)?;
    let region = tail_region(f, ld::arg::starts, t)?;
    if f.num_args() - t > ld::arg::mask {
        let m = f.arg(ld::arg::mask)?;
        m.expect_dtype(DType::Bool)?;
        let out = f.ret(1)?;
        if m.dims != out.dims {
            return Err(RtError::value(format!(
                "load: mask shape {:?} differs from value shape {:?}",
                m.dims, out.dims
            )));
        }
        let out_range = out.byte_range()?;
        let r = m.byte_range()?;
        if !r.is_empty() && r.start < out_range.end && out_range.start < r.end {
            return Err(RtError::value("load: the result buffer overlaps the mask operand"));
        }
        let mask = m.bytes()?;
        // SAFETY: the only slice of result 1; it does not overlap the mask
        // operand (checked just above), the only operand slice alive.
        return unsafe {
            out.fill_elements(|out| {
                launch::with_runtime(handle, |rt| {
                    rt.load_masked(MemRef::new(device, core, space, id, &region), mask, out)
                })
            })
        };
    }
    // SAFETY: the only slice of result 1, and no operand slice is alive
    // (`region` copied the starts); XLA aliases only the token pair.
    unsafe {
        f.ret(1)?.fill_elements(|out| {
            launch::with_runtime(handle, |rt| rt.load(MemRef::new(device, core, space, id, &region), out))
        })
    }
}

/// `store(token, handle, device, core, id, starts, value) -> token`;
/// attributes as for `load`.
pub fn store(c: &mut Call) -> Result<()> {
    let t = tail_len(&c.frame);
    let (handle, device, core) = core_target(c, st::arg::FIXED + t..=st::arg::FIXED + t, 1)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let id = f.arg_id(st::arg::buffer_id, "buffer id")?;
    let space = space_attr(f, st::attr::space)?;
    let region = tail_region(f, st::arg::starts, t)?;
    let data = f.arg(st::arg::value)?.elements()?;
    launch::with_runtime(handle, |rt| rt.store(MemRef::new(device, core, space, id, &region), &data))
}

/// Whether the optional `splat` attribute is set (non-zero).
fn splat_requested(c: &Call) -> Result<bool> {
    Ok(c.frame.attr_i64_opt(sw::attr::splat)?.is_some_and(|v| v != 0))
}

/// `swap(token, handle, device, core, id, starts, value[, mask]) -> (token, old)`;
/// `mask` is a bool array of the value's shape. The result `old` may be
/// left out (`-> token`) when the caller does not use it: nothing is read
/// out, the write and its race record are the same.
///
/// Optional attribute `splat` (non-zero): `value` is rank 0 and written to
/// every element of the region (no mask); the result `old` has the region's
/// shape.
pub fn swap(c: &mut Call) -> Result<()> {
    let splat = splat_requested(c)?;
    let rets = if c.frame.num_rets() == 1 { 1 } else { 2 };
    let t = tail_len(&c.frame);
    let (handle, device, core) =
        core_target(c, sw::arg::FIXED + t..=if splat { sw::arg::FIXED } else { sw::arg::mask + 1 } + t, rets)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let id = f.arg_id(sw::arg::buffer_id, "buffer id")?;
    let space = space_attr(f, sw::attr::space)?;
    let region = tail_region(f, sw::arg::starts, t)?;
    let masked = f.num_args() - t > sw::arg::mask;
    let value = f.arg(sw::arg::value)?;
    let data = value.elements()?;
    let stored = if splat {
        if !value.dims.is_empty() {
            return Err(RtError::value(format!("swap: a splat value must be rank 0, got shape {:?}", value.dims)));
        }
        Stored::Splat(&data)
    } else {
        Stored::Dense(&data)
    };
    let mask = if masked {
        let m = f.arg(sw::arg::mask)?;
        m.expect_dtype(DType::Bool)?;
        if m.dims != value.dims {
            return Err(RtError::value(format!(
                "swap: mask shape {:?} differs from value shape {:?}",
                m.dims, value.dims
            )));
        }
        Some(m.bytes()?)
    } else {
        None
    };
    let at = MemRef::new(device, core, space, id, &region);
    if rets == 1 {
        return launch::with_runtime(handle, |rt| rt.swap_value(at, stored, mask, None));
    }
    let out = f.ret(1)?;
    // A splat's result has the region's shape (the runtime checks its length).
    if out.dtype != value.dtype || !splat && out.dims != value.dims {
        return Err(RtError::value("swap: result must have the value's dtype and shape"));
    }
    let out_range = out.byte_range()?;
    let overlaps = |r: std::ops::Range<usize>| !r.is_empty() && r.start < out_range.end && out_range.start < r.end;
    if overlaps(value.byte_range()?) || masked && overlaps(f.arg(sw::arg::mask)?.byte_range()?) {
        return Err(RtError::value("swap: the result buffer overlaps the value or mask operand"));
    }
    // SAFETY: the only slice of result 1; it overlaps neither operand slice
    // alive here (`data`, `mask`: checked just above).
    unsafe { out.fill_elements(|out| launch::with_runtime(handle, |rt| rt.swap_value(at, stored, mask, Some(out)))) }
}
