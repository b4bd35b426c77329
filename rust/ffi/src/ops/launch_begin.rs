//! A launch's prologue as one call: `kernel_begin`, then every allocation
//! of the launch (`allocate_buffer` / `allocate_semaphores` with `core` =
//! -1), then optionally `device_barrier` and core 0's `grid_begin` -- the
//! same runtime functions in the same order as those ops, so ids, errors
//! and reports are theirs. Each custom call costs the user compile and
//! tracing time; a launch makes many allocations and would pay for each.
//!
//! ```text
//! token, handle, r_0.., r_n-1..[, go, p0.., p1..] = launch_begin(token, device, init operands..)
//! ```
//!
//! Item `k` (attributes, one entry per item) is a buffer or a semaphore
//! array. Its results, in item order: a buffer's id (int32 scalar), then for
//! a direct output its XLA result buffer (see `allocate_buffer`'s
//! `direct`; with an init operand, that operand aliased to it: an input
//! whose output is written in place starts as its value); a semaphore
//! array's ids (int32 of the array's shape, one
//! consecutive run). With a grid, `grid_begin`'s results follow.

use super::kernel;
use super::memory::{allocate, allocate_direct, BufferRequest};
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::{grid_begin as gb, launch_begin as lb};
use mosaic_rt_core::{DType, MemorySpace, Result, RtError, SemKind};

/// `item_kinds` entries.
const BUFFER: i64 = 0;
const SEMAPHORES: i64 = 1;
/// `item_flags` bits (buffers).
const HAS_INIT: i64 = 1;
const BORROW: i64 = 2;
const DIRECT: i64 = 4;
const HAS_LOGICAL: i64 = 8;

/// One decoded item.
enum Item {
    Buffer { request: BufferRequest, init: bool, direct: bool },
    Semaphores { kind: SemKind, count: u32 },
}

impl Item {
    fn results(&self) -> usize {
        match self {
            Item::Buffer { direct: true, .. } => 2,
            _ => 1,
        }
    }
}

/// `launch_begin(token, device, init..) -> (token, handle, results..)`.
/// Attributes: those of `kernel_begin`; per item `item_kinds` (0 buffer,
/// 1 semaphores), `item_flags` (bits: 1 an init operand follows, 2
/// borrow it, 4 direct output, 8 a logical shape is given), `item_spaces`
/// (a buffer's memory space code), `item_ranks` and the concatenated
/// `item_shapes` (a buffer's content shape, a semaphore array's shape),
/// `item_logical` (concatenated logical shapes of the items with flag 8),
/// `item_types` (a buffer's dtype name or a semaphore kind, joined by
/// U+001F); `barrier` (non-zero: a device barrier after the allocations).
/// Optionally then core 0's `grid_begin` (a launch of one core per
/// device): its attributes, with `block_items` naming per block the items
/// of its HBM and kernel buffers instead of id operands; its results
/// (`go`, the first two points) follow the items'.
pub fn launch_begin(c: &mut Call) -> Result<()> {
    let items = items(&c.frame)?;
    let inits = items.iter().filter(|i| matches!(i, Item::Buffer { init: true, .. })).count();
    let item_rets = 2 + items.iter().map(Item::results).sum::<usize>();
    let grid_rets = match c.frame.attr_i64s_opt(gb::attr::grid)? {
        Some(grid) => 1 + 2 * grid.len(),
        None => 0,
    };
    // The dynamic grid bounds follow the init operands.
    let args = lb::arg::FIXED + inits + super::grid::dynamic_dims(&c.frame)?;
    c.frame.expect_arity(args..=args, item_rets + grid_rets)?;
    let (handle, device) = kernel::join(c)?;
    let _site = c.enter_site();
    let f = &c.frame;
    let (mut arg, mut ret) = (lb::arg::FIXED, 2);
    let mut ids = Vec::with_capacity(items.len());
    for item in &items {
        let init_arg = match item {
            Item::Buffer { init: true, .. } => {
                arg += 1;
                Some(f.arg(arg - 1)?)
            }
            _ => None,
        };
        let id = match item {
            Item::Buffer { request, direct: true, .. } => {
                // A direct buffer's init operand is the input XLA aliases to
                // its result (see the module doc).
                let id = allocate_direct(handle, device, request, &f.ret(ret + 1)?, init_arg.as_ref())?;
                f.ret(ret)?.write_i32(id as i32)?;
                Some(id)
            }
            Item::Buffer { request, .. } => {
                let id = allocate(handle, device, request, init_arg.as_ref())?;
                f.ret(ret)?.write_i32(id as i32)?;
                Some(id)
            }
            &Item::Semaphores { kind, count } => {
                let first = launch::with_runtime(handle, |rt| rt.allocate_semaphores(device, None, kind, count))?;
                super::ids::write_ids(&f.ret(ret)?, first as i32)?;
                None
            }
        };
        ids.push(id);
        ret += item.results();
    }
    if f.attr_i64_opt(lb::attr::barrier)?.is_some_and(|v| v != 0) {
        launch::with_runtime(handle, |rt| rt.device_barrier(device))?;
    }
    if grid_rets > 0 {
        let blocks = block_ids(f, &ids)?;
        super::grid::begin(f, handle, device, 0, &blocks, lb::arg::FIXED + inits, item_rets)?;
    }
    Ok(())
}

/// With `grid` (core 0's `grid_begin` attributes): per block its (HBM,
/// kernel) buffer ids, from attribute `block_items` (per block the two
/// items that allocated them).
fn block_ids(f: &Frame, ids: &[Option<u32>]) -> Result<Vec<(u32, u32)>> {
    let items = f.attr_i64s(lb::attr::block_items)?;
    let id = |k: i64| {
        usize::try_from(k)
            .ok()
            .and_then(|k| ids.get(k).copied().flatten())
            .ok_or_else(|| RtError::value(format!("{}: block_items names item {k}, not a buffer", f.op)))
    };
    if items.len() % 2 != 0 {
        return Err(RtError::value(format!("{}: block_items must come in (HBM, kernel) pairs", f.op)));
    }
    items.chunks_exact(2).map(|p| Ok((id(p[0])?, id(p[1])?))).collect()
}

/// Splits `flat` into consecutive parts of `lens` (non-negative) values.
fn split<'a>(f: &Frame, flat: &'a [i64], lens: impl Iterator<Item = i64>, what: &str) -> Result<Vec<&'a [i64]>> {
    let mut at = 0usize;
    let mut out = Vec::new();
    for n in lens {
        let part = usize::try_from(n).ok().and_then(|n| flat.get(at..at + n));
        let part = part.ok_or_else(|| RtError::value(format!("{}: {what} lengths do not match its values", f.op)))?;
        at += part.len();
        out.push(part);
    }
    if at != flat.len() {
        return Err(RtError::value(format!("{}: {what} has values past its lengths", f.op)));
    }
    Ok(out)
}

fn dims(f: &Frame, d: &[i64]) -> Result<Vec<usize>> {
    d.iter()
        .map(|&d| usize::try_from(d).map_err(|_| RtError::value(format!("{}: negative dimension {d}", f.op))))
        .collect()
}

fn items(f: &Frame) -> Result<Vec<Item>> {
    let kinds = f.attr_i64s(lb::attr::item_kinds)?;
    let n = kinds.len();
    let flags = f.attr_i64s(lb::attr::item_flags)?;
    let spaces = f.attr_i64s(lb::attr::item_spaces)?;
    let ranks = f.attr_i64s(lb::attr::item_ranks)?;
    let types: Vec<&str> = match f.attr_str(lb::attr::item_types)? {
        "" if n == 0 => Vec::new(),
        s => s.split('\u{1f}').collect(),
    };
    if flags.len() != n || spaces.len() != n || ranks.len() != n || types.len() != n {
        return Err(RtError::value(format!(
            "{}: {n} items but {} flags, {} spaces, {} ranks and {} types",
            f.op,
            flags.len(),
            spaces.len(),
            ranks.len(),
            types.len()
        )));
    }
    let shapes = split(f, f.attr_i64s(lb::attr::item_shapes)?, ranks.iter().copied(), "item_shapes")?;
    let logical_ranks = (0..n).map(|k| if flags[k] & HAS_LOGICAL != 0 { ranks[k] } else { 0 });
    let logical = split(f, f.attr_i64s(lb::attr::item_logical)?, logical_ranks, "item_logical")?;
    (0..n)
        .map(|k| match kinds[k] {
            BUFFER if flags[k] & DIRECT != 0 && flags[k] & BORROW != 0 => {
                Err(RtError::internal(format!("{}: item {k}, a direct output, borrows its init value", f.op)))
            }
            BUFFER => Ok(Item::Buffer {
                request: BufferRequest {
                    core: None,
                    space: MemorySpace::from_code(spaces[k])?,
                    dtype: DType::from_name(types[k])?,
                    shape: dims(f, shapes[k])?,
                    logical: if flags[k] & HAS_LOGICAL != 0 { Some(dims(f, logical[k])?) } else { None },
                    borrow: flags[k] & BORROW != 0,
                },
                init: flags[k] & HAS_INIT != 0,
                direct: flags[k] & DIRECT != 0,
            }),
            SEMAPHORES => {
                let count = dims(f, shapes[k])?.iter().product::<usize>().max(1);
                Ok(Item::Semaphores {
                    kind: types[k].parse()?,
                    count: u32::try_from(count)
                        .map_err(|_| RtError::value(format!("{}: {count} semaphores are too many", f.op)))?,
                })
            }
            other => Err(RtError::value(format!("{}: unknown item kind {other}", f.op))),
        })
        .collect()
}
