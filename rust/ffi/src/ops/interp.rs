//! Ops only the Pallas interpreter needs: BlockSpec block copies (with
//! stock's block-index error messages), the output-revisit check and the
//! per-core PRNG.

use super::{core_target, region, space_attr, Tail, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::{
    check_revisit as revisit, copy_block as cb, iota_ids, prng_random_bits as bits, prng_seed as seed,
    wrap_target as wrap,
};
use mosaic_rt_core::memory::MemRef;
use mosaic_rt_core::region::python_tuple;
use mosaic_rt_core::{BufferKey, DType, DimSel, ErrorKind, Region, Result, RtError, Runtime, Topology};

fn ints_repr(xs: &[i32]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    python_tuple(&items)
}

fn shape_repr(xs: &[usize]) -> String {
    let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    python_tuple(&items)
}

/// `copy_block(token, handle, device, core, src_id, src_starts, dst_id,
/// dst_starts, block_indices, grid_point) -> token`.
///
/// Attributes: `src_space`, `dst_space`, `src_`/`dst_` region attributes,
/// `direction` ("input": HBM block -> kernel buffer, "output": kernel buffer
/// -> HBM block) and `arg_name` (the pallas_call argument's name). An
/// out-of-bounds block is reported the way stock reports it, naming the
/// argument, block indices and grid point.
pub fn copy_block(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, cb::arg::FIXED..=cb::arg::FIXED, 1)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let src_id = f.arg_id(cb::arg::src_id, "source buffer id")?;
    let src_region = region(f, &SRC_REGION, cb::arg::src_starts, &mut Tail::none())?;
    let dst_id = f.arg_id(cb::arg::dst_id, "destination buffer id")?;
    let dst_region = region(f, &DST_REGION, cb::arg::dst_starts, &mut Tail::none())?;
    let src_space = space_attr(f, cb::attr::src_space)?;
    let dst_space = space_attr(f, cb::attr::dst_space)?;
    let input = match f.attr_str(cb::attr::direction)? {
        "input" => true,
        "output" => false,
        d => return Err(RtError::value(format!("copy_block: bad direction {d:?}"))),
    };
    let block_indices = f.arg(cb::arg::block_indices)?.i32s()?;
    let grid_point = f.arg(cb::arg::grid_point)?.i32s()?;
    let name = f.attr_str(cb::attr::arg_name)?;
    launch::with_runtime(handle, |rt| {
        // A step's output block copies are a synchronisation point, as in
        // the native grid loop (`grid_copy_out`).
        if !input {
            rt.land_incoming(device, core)?;
        }
        let src = MemRef { device, core, space: src_space, id: src_id, region: &src_region };
        let dst = MemRef { device, core, space: dst_space, id: dst_id, region: &dst_region };
        block_copy(rt, src, dst, input, block_indices, name, grid_point)
    })
}

/// Copies one BlockSpec block (`input`: HBM -> kernel buffer, else kernel
/// buffer -> HBM); an out-of-bounds block is reported the way stock reports
/// it, naming the argument, block indices and grid point.
pub(crate) fn block_copy(
    rt: &Runtime,
    src: MemRef<'_>,
    dst: MemRef<'_>,
    input: bool,
    block_indices: &[i32],
    name: &str,
    grid_point: &[i32],
) -> Result<()> {
    let err = match rt.copy(src, dst) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    block_copy_error(rt, src, dst, input, block_indices, name, grid_point, err)
}

#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn block_copy_error(
    rt: &Runtime,
    src: MemRef<'_>,
    dst: MemRef<'_>,
    input: bool,
    block_indices: &[i32],
    name: &str,
    grid_point: &[i32],
    err: RtError,
) -> Result<()> {
    // A block outside its HBM buffer: an index error when read, an
    // out-of-bounds write when written back.
    let oob = if input { err.kind == ErrorKind::Index } else { err.kind == ErrorKind::OutOfBoundsWrite };
    if !oob {
        return Err(err);
    }
    let (hbm, what) = if input { (src, "input") } else { (dst, "output") };
    let (device, core) = (src.device, src.core);
    let info = rt.buffer_info(BufferKey::for_access(hbm.space, hbm.id, device, core))?;
    Err(RtError::index(format!(
        "Out-of-bounds block index {} for {what} \"{name}\" in iteration {} on device \
         {device} (core {core}): reading [{}] but {what} has shape {}.",
        ints_repr(block_indices),
        ints_repr(grid_point),
        hbm.region.python_repr(),
        shape_repr(&info.logical_shape)
    )))
}

/// `check_revisit(token, handle, device, core, loop_idx, starts) -> token`.
///
/// Attributes: `ranks` (per output: its block rank, or -1 when the output is
/// not tracked) and the concatenated `sizes`/`strides`/`squeezed` of the
/// tracked outputs, whose starts are concatenated in operand `starts`.
pub fn check_revisit(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, revisit::arg::FIXED..=revisit::arg::FIXED, 1)?;
    let f = &c.frame;
    let loop_idx: Vec<i64> = f.arg(revisit::arg::loop_idx)?.i32s()?.iter().map(|&i| i as i64).collect();
    let all = region(f, &super::REGION, revisit::arg::starts, &mut Tail::none())?;
    let blocks = split_blocks(f, all)?;
    launch::with_runtime(handle, |rt| rt.check_revisit(device, core, &loop_idx, &blocks))
}

fn split_blocks(f: &Frame, all: Region) -> Result<Vec<Option<Region>>> {
    let mut dims = all.dims.into_iter();
    let mut blocks = Vec::new();
    for &rank in f.attr_i64s(revisit::attr::ranks)? {
        if rank < 0 {
            blocks.push(None);
            continue;
        }
        let part: Vec<DimSel> = dims.by_ref().take(rank as usize).collect();
        if part.len() != rank as usize {
            return Err(RtError::value("check_revisit: ranks exceed the given dimensions"));
        }
        blocks.push(Some(Region::new(part)));
    }
    if dims.next().is_some() {
        return Err(RtError::value("check_revisit: more dimensions than ranks account for"));
    }
    Ok(blocks)
}

/// `prng_seed(token, handle, device, core, seeds) -> token` (int32 vector).
pub fn prng_seed(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, seed::arg::FIXED..=seed::arg::FIXED, 1)?;
    let seeds: Vec<i64> = c.frame.arg(seed::arg::seeds)?.i32s()?.iter().map(|&s| s as i64).collect();
    launch::with_runtime(handle, |rt| rt.prng_seed(device, core, &seeds))
}

/// `prng_random_bits(token, handle, device, core) -> (token, bits)`; the
/// result (any 32-bit integer dtype and shape) is filled with random words.
pub fn prng_random_bits(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, bits::arg::FIXED..=bits::arg::FIXED, 2)?;
    let out = c.frame.ret(1)?;
    let dtype = out.dtype()?;
    if !matches!(dtype, DType::I32 | DType::U32) {
        return Err(RtError::value(format!("prng_random_bits: result must be int32 or uint32, got {}", dtype.name())));
    }
    // SAFETY: the only slice of result 1, and no operand slice is alive.
    let bytes = unsafe { out.bytes_mut()? };
    let mut words = vec![0u32; bytes.len() / 4];
    launch::with_runtime(handle, |rt| rt.prng_bits(device, core, &mut words))?;
    for (chunk, w) in bytes.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Ok(())
}

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
