//! One handler body per operation. Operand order is always
//! `token, handle, device[, core], ...`; result 0 is the token (aliased to
//! operand 0 by the Python wrappers, so a device's calls keep program order).
//! Static parameters are attributes, dynamic ones operands.

pub mod batch;
pub mod block_copy;
pub mod dma;
pub mod dma_plan;
pub mod dma_start_call;
pub mod grid;
pub mod ids;
pub mod kernel;
pub mod launch_begin;
pub mod memory;
pub mod prng;
pub mod revisit;
pub mod scalar;
pub mod sem;
pub mod threefry;
pub mod trace;
pub mod vector;
pub mod waits;

use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire;
use mosaic_rt_core::{DType, DimSel, MemorySpace, Region, Result, RtError};
use std::ops::RangeInclusive;

/// Checks the token operand and forwards it to result 0 (a no-op when XLA
/// aliased the two, a 4-byte copy otherwise).
#[inline]
pub fn pass_token(f: &Frame) -> Result<()> {
    f.forward_token()
}

/// The launch handle operand (`uint32[2]`) at position `i`.
#[inline]
pub fn handle_arg(f: &Frame, i: usize) -> Result<u64> {
    match f.arg_u32_pair(i) {
        Some(parts) => Ok(launch::join_handle(parts)),
        None => bad_handle(f, i),
    }
}

#[cold]
#[inline(never)]
fn bad_handle(f: &Frame, i: usize) -> Result<u64> {
    let b = f.arg(i)?;
    b.expect_dtype(DType::U32)?;
    if b.dims != [2] {
        return Err(RtError::value(format!(
            "{}: the launch handle (operand {i}) must be uint32[2], got shape {:?}",
            f.op, b.dims
        )));
    }
    let bytes = b.bytes()?;
    let word = |k: usize| u32::from_ne_bytes([bytes[4 * k], bytes[4 * k + 1], bytes[4 * k + 2], bytes[4 * k + 3]]);
    let parts = [word(0), word(1)];
    Ok(launch::join_handle(parts))
}

/// Reads `handle, device` (operands [`wire::HANDLE`], [`wire::DEVICE`]), binds the call to that launch,
/// then checks the arity and the token. Binding comes first so that any
/// later error fails the whole launch instead of leaving the other devices
/// waiting for this one.
#[inline]
pub fn device_target(c: &mut Call, args: RangeInclusive<usize>, rets: usize) -> Result<(u64, u32)> {
    let handle = handle_arg(&c.frame, wire::HANDLE)?;
    let device = c.frame.arg_id(wire::DEVICE, "device id")?;
    c.bind(handle, device);
    c.frame.expect_arity(args, rets)?;
    pass_token(&c.frame)?;
    Ok((handle, device))
}

/// Reads `token, handle, device, core` and binds the call to that launch.
#[inline]
pub fn core_target(c: &mut Call, args: RangeInclusive<usize>, rets: usize) -> Result<(u64, u32, u32)> {
    let (handle, device) = device_target(c, args, rets)?;
    let core = c.frame.arg_id(wire::CORE, "core id")?;
    Ok((handle, device, core))
}

/// The `space` attribute (prefixed, e.g. `src_space`).
pub fn space_attr(f: &Frame, name: &str) -> Result<MemorySpace> {
    Ok(MemorySpace::from_code(f.attr_i64(name)?)?)
}

pub use crate::wire::{RegionAttrs, DST_REGION, DYNAMIC_SIZE, DYNAMIC_START, REGION, SRC_REGION, TAIL_STARTS};

/// How many trailing start operands an op has (read before the arity check,
/// which needs it: an absent or malformed attribute counts 0, and then the
/// arity check or the region reports what does not fit).
pub fn tail_len(f: &Frame) -> usize {
    f.attr_i64_opt(TAIL_STARTS).ok().flatten().and_then(|n| usize::try_from(n).ok()).unwrap_or(0)
}

/// The trailing start operands of an op not taken yet by its regions
/// (operands `next..end`).
pub struct Tail {
    next: usize,
    end: usize,
}

impl Tail {
    /// The last `len` operands of `f` (the arity check has counted them).
    pub fn of(f: &Frame, len: usize) -> Tail {
        let end = f.num_args();
        Tail { next: end.saturating_sub(len), end }
    }

    /// The `len` operands of `f` before its last `skip`.
    pub fn before(f: &Frame, len: usize, skip: usize) -> Tail {
        let end = f.num_args().saturating_sub(skip);
        Tail { next: end.saturating_sub(len), end }
    }

    /// None: an op with no trailing starts.
    pub fn none() -> Tail {
        Tail { next: 0, end: 0 }
    }

    /// Fails unless every trailing start was taken by a region.
    pub fn finish(&self, f: &Frame) -> Result<()> {
        if self.next != self.end {
            return Err(RtError::value(format!(
                "{}: {} trailing start operand(s) left over (attribute `{TAIL_STARTS}`)",
                f.op,
                self.end - self.next
            )));
        }
        Ok(())
    }
}

/// A region's static attributes: sizes, strides, squeezed flags and
/// (optional) fixed starts, as the frame holds them or as a cached plan
/// keeps them (see `dma_plan`).
#[derive(Clone, Copy)]
pub struct StaticRegion<'s> {
    pub sizes: &'s [i64],
    pub strides: &'s [i64],
    pub squeezed: &'s [i64],
    pub fixed: Option<&'s [i64]>,
}

impl<'s> StaticRegion<'s> {
    /// The attributes named by `names` of `f`.
    pub fn read(f: &Frame<'s>, names: &RegionAttrs) -> Result<StaticRegion<'s>> {
        Ok(StaticRegion {
            sizes: f.attr_i64s(names.sizes)?,
            strides: f.attr_i64s(names.strides)?,
            squeezed: f.attr_i64s(names.squeezed)?,
            fixed: f.attr_i64s_opt(names.fixed)?,
        })
    }
}

/// A region: static sizes, strides and squeezed flags (attributes named by
/// `names`) and a dynamic int32 start vector operand (or scalar: one start;
/// or the first of several, the others taken from `tail`).
pub fn region(f: &Frame, names: &RegionAttrs, starts_arg: usize, tail: &mut Tail) -> Result<Region> {
    region_of(f, names, StaticRegion::read(f, names)?, starts_arg, tail)
}

/// [`region`] with its static attributes already read (`names` only for
/// messages).
pub fn region_of(
    f: &Frame,
    names: &RegionAttrs,
    spec: StaticRegion,
    starts_arg: usize,
    tail: &mut Tail,
) -> Result<Region> {
    let StaticRegion { sizes, strides, squeezed, fixed } = spec;
    let slot = f.arg(starts_arg)?;
    let mut starts = slot.starts()?;
    let joined;
    if tail.next < tail.end && slot.dims.is_empty() {
        joined = join_tail(f, sizes, fixed, starts, tail)?;
        starts = &joined;
    }
    let n = sizes.len();
    if sizes.contains(&DYNAMIC_SIZE) {
        return dynamic_size_region(f, names, spec, starts);
    }
    if starts.len() != n && strides.len() == n && squeezed.len() == n {
        return fixed_region(f, names, sizes, strides, squeezed, fixed, starts);
    }
    if strides.len() != n || squeezed.len() != n || starts.len() != n {
        return Err(RtError::value(format!(
            "{}: region {:?} has {n} sizes but {} strides, {} squeezed flags and {} starts",
            f.op,
            names.sizes,
            strides.len(),
            squeezed.len(),
            starts.len()
        )));
    }
    let dims = (0..n)
        .map(|i| DimSel { start: starts[i] as i64, size: sizes[i], stride: strides[i], squeezed: squeezed[i] != 0 })
        .collect();
    Ok(Region::new(dims))
}

/// The dynamic values of a region whose scalar start operand is the first
/// of several: it, then as many trailing operands as the region has dynamic
/// starts (all its dims without a `fixed` attribute, else its
/// [`DYNAMIC_START`] entries) and dynamic sizes ([`DYNAMIC_SIZE`]) left.
#[cold]
#[inline(never)]
fn join_tail(f: &Frame, sizes: &[i64], fixed: Option<&[i64]>, first: &[i32], tail: &mut Tail) -> Result<Vec<i32>> {
    let starts = match fixed {
        Some(fixed) => fixed.iter().filter(|&&s| s == DYNAMIC_START).count(),
        None => sizes.len(),
    };
    let dynamic = starts + sizes.iter().filter(|&&s| s == DYNAMIC_SIZE).count();
    let mut out = first.to_vec();
    while out.len() < dynamic && tail.next < tail.end {
        out.push(f.arg(tail.next)?.scalar_i32()?);
        tail.next += 1;
    }
    Ok(out)
}

/// A region whose static starts are an attribute (`names.fixed`) and whose
/// operand holds only the dynamic ones (so the program needs no vector of
/// constants and scalars: no concatenate kernel).
#[cold]
#[inline(never)]
fn fixed_region(
    f: &Frame,
    names: &RegionAttrs,
    sizes: &[i64],
    strides: &[i64],
    squeezed: &[i64],
    fixed: Option<&[i64]>,
    dynamic: &[i32],
) -> Result<Region> {
    let fixed = fixed.unwrap_or(&[]);
    let mut next = dynamic.iter();
    let mut dims = Vec::with_capacity(sizes.len());
    for (i, &size) in sizes.iter().enumerate() {
        let start = match fixed.get(i) {
            Some(&DYNAMIC_START) => next.next().map(|&s| s as i64),
            Some(&s) => Some(s),
            None => None,
        };
        let Some(start) = start else { break };
        dims.push(DimSel { start, size, stride: strides[i], squeezed: squeezed[i] != 0 });
    }
    if dims.len() != sizes.len() || fixed.len() != sizes.len() || next.next().is_some() {
        return Err(RtError::value(format!(
            "{}: region {:?} has {} sizes but {} fixed starts and {} dynamic starts",
            f.op,
            names.sizes,
            sizes.len(),
            fixed.len(),
            dynamic.len()
        )));
    }
    Ok(Region::new(dims))
}

/// A region with sizes known at run time only ([`DYNAMIC_SIZE`] entries):
/// its operand holds the dynamic starts (per the `fixed` attribute), then
/// the dynamic sizes. A negative size is an error naming the dimension.
#[cold]
#[inline(never)]
fn dynamic_size_region(f: &Frame, names: &RegionAttrs, spec: StaticRegion, operand: &[i32]) -> Result<Region> {
    let StaticRegion { sizes, strides, squeezed, fixed } = spec;
    let dynamic_starts = match fixed {
        Some(fixed) => fixed.iter().filter(|&&s| s == DYNAMIC_START).count(),
        None => sizes.len(),
    };
    let dynamic_sizes = sizes.iter().filter(|&&s| s == DYNAMIC_SIZE).count();
    if operand.len() != dynamic_starts + dynamic_sizes {
        return Err(RtError::value(format!(
            "{}: region {:?} has {dynamic_starts} dynamic starts and {dynamic_sizes} dynamic sizes but its operand holds {} values",
            f.op,
            names.sizes,
            operand.len()
        )));
    }
    let (starts, given) = operand.split_at(dynamic_starts);
    let mut given = given.iter();
    let mut resolved = Vec::with_capacity(sizes.len());
    for (dim, &size) in sizes.iter().enumerate() {
        if size != DYNAMIC_SIZE {
            resolved.push(size);
            continue;
        }
        let n = i64::from(*given.next().expect("counted above"));
        if n < 0 {
            return Err(RtError::value(format!(
                "{}: slice size {n} of dimension {dim} is negative (a `pl.ds(start, size)` of traced size)",
                f.op
            )));
        }
        resolved.push(n);
    }
    if fixed.is_some() {
        return fixed_region(f, names, &resolved, strides, squeezed, fixed, starts);
    }
    let dims = (0..sizes.len())
        .map(|i| DimSel {
            start: i64::from(starts[i]),
            size: resolved[i],
            stride: strides[i],
            squeezed: squeezed[i] != 0,
        })
        .collect();
    Ok(Region::new(dims))
}

/// An optional target id operand: with the static attribute `flag` (its
/// value, read by the caller) the
/// operand is used exactly when the attribute is non-zero, and a negative
/// value is an error naming it; without the attribute -1 means "not given".
pub fn target_arg(f: &Frame, handle: u64, i: usize, flag: Option<i64>, what: &str) -> Result<Option<u32>> {
    match flag {
        None => f.arg_opt_id(i, what),
        Some(0) => Ok(None),
        Some(_) => target_id(handle, f.arg_i32(i)?.into(), what).map(Some),
    }
}

/// A given target id: a negative one is an error naming it.
pub fn target_id(handle: u64, v: i64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| negative_target(handle, what, v))
}

#[cold]
fn negative_target(handle: u64, what: &str, v: i64) -> RtError {
    let topo = launch::with_runtime(handle, |rt| Ok(rt.topology())).ok();
    let n = match topo {
        Some(t) if what.contains("core") => Some(t.cores_per_device),
        Some(t) => Some(t.num_devices),
        None => None,
    };
    match n {
        Some(n) => RtError::value(format!(
            "{what} {v} out of range: valid ids are 0 to {} ({n} in the launch)",
            n.saturating_sub(1)
        )),
        None => RtError::value(format!("{what} {v} out of range: ids are >= 0")),
    }
}
