//! The grid loop of a BlockSpec pallas_call as three ops (see
//! `mosaic_rt_core::grid`): per grid step one call before the kernel body
//! (copy-in) and one after it (copy-out, revisit check, next grid point),
//! so the emitted program computes nothing but the user's index maps.
//!
//! ```text
//! token, go, p0.., p1.. = grid_begin(token, handle, device, core, (hbm_id, kernel_id) per block)
//! token, idx0 = index maps at p0
//! while go:                                   # carry: token, go, p_k, p_k+1, idx_k
//!     token, idx_k+1 = index maps at p_k+1
//!     token = grid_copy_in(token, handle, device, core, idx_k of the input blocks..)
//!     token = kernel body at p_k
//!     token, go, p_k+2.. = grid_copy_out(token, handle, device, core,
//!                                        idx_k of the output blocks.., idx_k+1 of them..)
//! ```
//!
//! Points are int32 scalar results, `go` a pred scalar. Block indices are
//! int32 scalar operands, block after block.

use super::block_copy::block_copy;
use super::{core_target, handle_arg, pass_token};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::{self, grid_begin as gb};
use mosaic_rt_core::grid::{Block, BlockCopy, GridLoop, GridSpec};
use mosaic_rt_core::memory::MemRef;
use mosaic_rt_core::{MemorySpace, Region, Result, RtError, Runtime};

/// `grid_begin(token, handle, device, core, (hbm id, kernel id) per block)
/// -> (token, go, p0.., p1..)`.
///
/// Attributes: `grid`, `order` (the visiting orders, concatenated) and
/// `order_lens` (per dim, 0 for the identity), `iters_per_core`,
/// `num_iterations`; per block `block_outputs` (0/1), `block_spaces` (the
/// kernel buffer's space), `block_ranks`, and concatenated `block_sizes`,
/// `block_squeezed`, `block_factors`; `block_names` (joined by U+001F);
/// `revisit` (per pallas_call output: its block, or -1 if untracked).
pub fn grid_begin(c: &mut Call) -> Result<()> {
    let (handle, device, core) = target(c, |f| Ok(2 + 2 * f.attr_i64s(gb::attr::grid)?.len()))?;
    let f = &c.frame;
    let n = f.attr_i64s(gb::attr::block_outputs)?.len();
    let dynamic = dynamic_dims(f)?;
    if f.num_args() != gb::arg::FIXED + 2 * n + dynamic {
        return Err(RtError::value(format!(
            "grid_begin: {n} blocks and {dynamic} dynamic grid bounds but {} operands after the core",
            f.num_args().saturating_sub(gb::arg::FIXED)
        )));
    }
    let ids = (0..n)
        .map(|b| {
            Ok((
                f.arg_id(gb::arg::FIXED + 2 * b, "HBM buffer id")?,
                f.arg_id(gb::arg::FIXED + 1 + 2 * b, "kernel buffer id")?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    begin(f, handle, device, core, &ids, gb::arg::FIXED + 2 * n, 1)
}

/// How many grid dims are dynamic (-1 in attribute `grid`): their bounds
/// are int32 operands, after the op's others.
pub fn dynamic_dims(f: &Frame) -> Result<usize> {
    Ok(f.attr_i64s_opt(gb::attr::grid)?.map_or(0, |g| g.iter().filter(|&&d| d < 0).count()))
}

/// The grid's dims, iteration count and iterations per core. Dynamic dims
/// (-1) take their bounds from operands `first_dynamic..`; then the counts
/// are computed as stock splits a grid between cores (attributes
/// `parallel_subgrid`, `grid_cores`), and an empty grid runs no iteration
/// (its zero dims become 1, so the loop starts at a valid point).
fn grid_spec(f: &Frame, first_dynamic: usize) -> Result<GridSpec> {
    let order = split(f.attr_i64s(gb::attr::order)?, f.attr_i64s(gb::attr::order_lens)?, "order")?;
    let mut grid = f.attr_i64s(gb::attr::grid)?.to_vec();
    if grid.iter().all(|&d| d >= 0) {
        return Ok(GridSpec {
            order,
            grid,
            iters_per_core: f.attr_i64(gb::attr::iters_per_core)?,
            num_iterations: f.attr_i64(gb::attr::num_iterations)?,
        });
    }
    for (arg, d) in (first_dynamic..).zip(grid.iter_mut().filter(|d| **d < 0)) {
        let bound = f.arg_i32(arg)?;
        if bound < 0 {
            return Err(RtError::value(format!("grid_begin: negative grid bound {bound}")));
        }
        *d = i64::from(bound);
    }
    let num_iterations: i64 = grid.iter().product();
    let sub = f.attr_i64(gb::attr::parallel_subgrid)?.max(1);
    let cores = f.attr_i64(gb::attr::grid_cores)?.max(1);
    let iters_per_core = (sub + cores - 1) / cores * (num_iterations / sub);
    for d in grid.iter_mut().filter(|d| **d == 0) {
        *d = 1;
    }
    Ok(GridSpec { order, grid, iters_per_core, num_iterations })
}

/// Starts the grid loop of (device, core) from `grid_begin`'s attributes,
/// with per block its (HBM, kernel) buffer ids and the dynamic grid bounds
/// from operand `first_dynamic` on; writes `go` to result `first_ret` and
/// the first two points to the results after it.
pub fn begin(
    f: &Frame,
    handle: u64,
    device: u32,
    core: u32,
    ids: &[(u32, u32)],
    first_dynamic: usize,
    first_ret: usize,
) -> Result<()> {
    let spec = grid_spec(f, first_dynamic)?;
    let blocks = blocks(f, ids)?;
    let revisit = f.attr_i64s(gb::attr::revisit)?.iter().map(|&b| usize::try_from(b).ok()).collect();
    let grid = GridLoop::new(spec, blocks, revisit, core)?;
    let points: Vec<i32> = grid.point().iter().copied().chain(grid.next_point()).collect();
    write_step(f, first_ret, grid.go(), &points)?;
    launch::with_runtime(handle, |rt| rt.grid_begin(device, core, grid))
}

/// Like `core_target` for ops with a variable number of operands (>= 4)
/// and `rets(frame)` results.
fn target(c: &mut Call, rets: impl FnOnce(&Frame) -> Result<usize>) -> Result<(u64, u32, u32)> {
    let handle = handle_arg(&c.frame, wire::HANDLE)?;
    let device = c.frame.arg_id(wire::DEVICE, "device id")?;
    c.bind(handle, device);
    let rets = rets(&c.frame)?;
    c.frame.expect_arity(gb::arg::FIXED..=usize::MAX, rets)?;
    pass_token(&c.frame)?;
    Ok((handle, device, c.frame.arg_id(wire::CORE, "core id")?))
}

fn split(flat: &[i64], lens: &[i64], what: &str) -> Result<Vec<Vec<i64>>> {
    let mut out = Vec::with_capacity(lens.len());
    let mut at = 0usize;
    for &n in lens {
        let n = usize::try_from(n).map_err(|_| RtError::value(format!("grid_begin: negative {what} length")))?;
        let part = flat
            .get(at..at + n)
            .ok_or_else(|| RtError::value(format!("grid_begin: {what} lengths exceed the values")))?;
        out.push(part.to_vec());
        at += n;
    }
    if at != flat.len() {
        return Err(RtError::value(format!("grid_begin: {what} has values past its lengths")));
    }
    Ok(out)
}

fn blocks(f: &Frame, ids: &[(u32, u32)]) -> Result<Vec<Block>> {
    let outputs = f.attr_i64s(gb::attr::block_outputs)?;
    let n = outputs.len();
    let spaces = f.attr_i64s(gb::attr::block_spaces)?;
    let ranks = f.attr_i64s(gb::attr::block_ranks)?;
    let sizes = split(f.attr_i64s(gb::attr::block_sizes)?, ranks, "block_sizes")?;
    let squeezed = split(f.attr_i64s(gb::attr::block_squeezed)?, ranks, "block_squeezed")?;
    let factors = split(f.attr_i64s(gb::attr::block_factors)?, ranks, "block_factors")?;
    let names: Vec<&str> = match f.attr_str(gb::attr::block_names)? {
        "" if n == 0 => Vec::new(),
        s => s.split('\u{1f}').collect(),
    };
    if spaces.len() != n || ranks.len() != n || names.len() != n || ids.len() != n {
        return Err(RtError::value(format!(
            "grid_begin: {n} blocks but {} spaces, {} ranks, {} names and {} buffer id pairs",
            spaces.len(),
            ranks.len(),
            names.len(),
            ids.len()
        )));
    }
    let mut out = Vec::with_capacity(n);
    for (b, (((sizes, squeezed), factors), name)) in sizes.into_iter().zip(squeezed).zip(factors).zip(names).enumerate()
    {
        out.push(Block {
            output: outputs[b] != 0,
            space: MemorySpace::from_code(spaces[b])?,
            hbm_id: ids[b].0,
            kernel_id: ids[b].1,
            sizes,
            squeezed: squeezed.into_iter().map(|s| s != 0).collect(),
            factors,
            name: name.to_string(),
        });
    }
    Ok(out)
}

/// Writes `go` (result `at`, pred) and the grid point coordinates (the
/// results after it).
fn write_step(f: &Frame, at: usize, go: bool, points: &[i32]) -> Result<()> {
    write_go(f, at, go)?;
    for (k, &p) in points.iter().enumerate() {
        f.ret(at + 1 + k)?.write_i32(p)?;
    }
    Ok(())
}

/// Writes `go` (result `at`, a pred scalar).
fn write_go(f: &Frame, at: usize, go: bool) -> Result<()> {
    let r = f.ret(at)?;
    r.expect_dtype(mosaic_rt_core::DType::Bool)?;
    r.expect_rank(0)?;
    // SAFETY: the only slice of result `at` (a 1-byte pred scalar, checked);
    // no other slice of it is alive, and results are not aliased to
    // operands but the token.
    let byte = unsafe { r.bytes_mut()? };
    byte[0] = go as u8;
    Ok(())
}

fn indices(f: &Frame) -> Result<Vec<i32>> {
    (wire::grid_copy_in::arg::FIXED..f.num_args()).map(|i| f.arg_i32(i)).collect()
}

fn copy(rt: &Runtime, device: u32, core: u32, c: &BlockCopy<'_>) -> Result<()> {
    let b = c.block;
    let whole = Region::full();
    let hbm = MemRef { device, core, space: MemorySpace::Hbm, id: b.hbm_id, region: c.region };
    let kernel = MemRef { device, core, space: b.space, id: b.kernel_id, region: &whole };
    if b.output {
        block_copy(rt, kernel, hbm, false, c.indices, &b.name, c.point)
    } else {
        block_copy(rt, hbm, kernel, true, c.indices, &b.name, c.point)
    }
}

/// `grid_copy_in(token, handle, device, core, idx..) -> token`: copies in
/// the input blocks of this step that moved (block indices of every input
/// block, in order).
pub fn grid_copy_in(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, wire::grid_copy_in::arg::FIXED..=usize::MAX, 1)?;
    let _site = c.enter_site();
    let idx = indices(&c.frame)?;
    launch::with_runtime(handle, |rt| rt.with_grid(device, core, |g| g.copy_in(&idx, |b| copy(rt, device, core, b))))
}

/// `grid_copy_out(token, handle, device, core, cur.., next..) -> (token, go,
/// p..)`: copies out the output blocks of this step that the next step does
/// not write (`cur`/`next`: their block indices in this and the next step),
/// checks for revisited blocks, and returns whether the loop goes on and the
/// grid point after the next one (whose block indices the next step
/// computes).
pub fn grid_copy_out(c: &mut Call) -> Result<()> {
    let (handle, device, core) = target(c, |f| Ok(f.num_rets().max(2)))?;
    let _site = c.enter_site();
    let f = &c.frame;
    let idx = indices(f)?;
    if idx.len() % 2 != 0 {
        return Err(RtError::value("grid_copy_out: block indices must come in (cur, next) halves"));
    }
    let (cur, next) = idx.split_at(idx.len() / 2);
    launch::with_runtime(handle, |rt| {
        // The end of a step is a synchronisation point (`Runtime::land_incoming`).
        rt.land_incoming(device, core)?;
        rt.with_grid(device, core, |g| {
            g.copy_out(
                cur,
                next,
                |b| copy(rt, device, core, b),
                |loop_idx, blocks| rt.check_revisit(device, core, loop_idx, blocks),
            )?;
            let nd = g.loop_indices().len();
            if f.num_rets() != 2 + nd {
                return Err(RtError::value(format!(
                    "grid_copy_out: a {nd}-d grid needs {} results, got {}",
                    2 + nd,
                    f.num_rets()
                )));
            }
            write_go(f, 1, g.go())?;
            g.for_next_point(|d, p| f.ret(2 + d)?.write_i32(p))
        })
    })
}
