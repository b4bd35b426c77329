//! BlockSpec block copies of the Pallas interpreter: a copy between an HBM
//! block and a kernel buffer whose out-of-bounds error reads as stock's
//! (naming the argument, block indices and grid point), since tests match
//! that text.

use super::{core_target, region, space_attr, Tail, DST_REGION, SRC_REGION};
use crate::dispatch::Call;
use crate::launch;
use crate::wire::copy_block as cb;
use mosaic_rt_core::memory::MemRef;
use mosaic_rt_core::region::python_tuple;
use mosaic_rt_core::{BufferKey, ErrorKind, Result, RtError, Runtime};

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
