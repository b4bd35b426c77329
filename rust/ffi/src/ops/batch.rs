//! `batch`: a straight-line run of token-threaded ops as one custom call.
//!
//! XLA compiles every custom call on its own (a cost in every cold call:
//! benches/PERFORMANCE.md, "Native compute instead of XLA fusions") and
//! runs each as a thunk. The memory, DMA and semaphore ops
//! of a kernel block that no XLA compute separates need not be separate
//! calls: `batch` runs them in order, each through its own handler on a
//! call frame of its own (its operands, results and attributes picked out
//! of the batch's), so each keeps its checks, messages and source site.
//!
//! Operands: the token (0), then the members' other operands, shared ones
//! once. Results: the token (0, aliased to operand 0), then the members'
//! value results. Attributes:
//! * `ops`: the members' op codes ([`MEMBERS`], exported to Python as
//!   `_native.BATCH_OPS`), in program order;
//! * `args` / `rets`: for each member in turn, its operand (result) count,
//!   then the index of each in the batch's operands (results); a
//!   token-threaded member's operand 0 and result 0 are the batch's token
//!   (a pure member, the vector program, has none);
//! * member k's own attribute `name` as `m{k}_{name}`, k written with
//!   [`MEMBER_DIGITS`] digits (`m007_site`): XLA sorts attributes by name,
//!   so each member's are one run of the batch's, in member order, and its
//!   frame shows that run in place (names read past the prefix).
//!
//! An operand index `-j` (j >= 1) is the batch's result j, which an
//! earlier member wrote: a row's `load -> vector program -> store` is one
//! call, its values never leaving the batch. Every buffer a frame gets is
//! still XLA's own, and a member's results are never its own operands (the
//! Python side refers only to earlier members' results).

use super::{block_copy, dma, grid, kernel, memory, prng, revisit, sem, trace, vector};
use crate::abi::{self, CallFrame};
use crate::dispatch::{Body, Call};
use crate::frame::Frame;
use mosaic_rt_core::{Result, RtError};
use std::ffi::c_void;

/// The ops a batch may hold, by code (index). Ops that alias more than the
/// token, or that begin or end a launch, are not members.
pub const MEMBERS: &[(&str, Body)] = &[
    ("mosaic_rt_load", memory::load),
    ("mosaic_rt_store", memory::store),
    ("mosaic_rt_swap", memory::swap),
    ("mosaic_rt_free_buffer", memory::free_buffer),
    ("mosaic_rt_allocate_semaphores", sem::allocate_semaphores),
    ("mosaic_rt_barrier_semaphore", sem::barrier_semaphore),
    ("mosaic_rt_semaphore_signal", sem::semaphore_signal),
    ("mosaic_rt_semaphore_wait", sem::semaphore_wait),
    ("mosaic_rt_semaphore_read", sem::semaphore_read),
    ("mosaic_rt_dma_start", dma::dma_start),
    ("mosaic_rt_dma_wait", dma::dma_wait),
    ("mosaic_rt_copy_block", block_copy::copy_block),
    ("mosaic_rt_check_revisit", revisit::check_revisit),
    ("mosaic_rt_prng_seed", prng::prng_seed),
    ("mosaic_rt_prng_random_bits", prng::prng_random_bits),
    ("mosaic_rt_grid_copy_in", grid::grid_copy_in),
    ("mosaic_rt_grid_copy_out", grid::grid_copy_out),
    ("mosaic_rt_grid_step", trace::grid_step),
    ("mosaic_rt_core_end", kernel::core_end),
    ("mosaic_rt_device_barrier", kernel::device_barrier),
    ("mosaic_rt_sync_device_cores", kernel::sync_device_cores),
    ("mosaic_rt_leak_report", kernel::leak_report),
    ("mosaic_rt_vector_program", vector::vector_program),
];

/// Most members, operands / results of one member, and attributes of one
/// batch (the member frames are built on the stack; the Python side keeps
/// within these). A SparseCore trip of 128 rows' `load -> program -> store`
/// is ~400 members and ~2,000 attributes.
pub const MAX_MEMBERS: usize = 512;
pub const MAX_MEMBER_ARGS: usize = 32;
pub const MAX_MEMBER_RETS: usize = 8;
pub const MAX_ATTRS: usize = 4096;

/// Digits of a member's index in its attribute names (`m007_site`): as
/// many for every member, so that XLA's sorting of the names by bytes
/// keeps the members in order and each member's attributes together.
pub const MEMBER_DIGITS: usize = digits(MAX_MEMBERS - 1);

/// The length of a member attribute's prefix `m{k}_`.
const PREFIX: usize = MEMBER_DIGITS + 2;

const fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

pub fn batch(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let ops = f.attr_i64s(crate::wire::batch::attr::ops)?;
    let arg_map = f.attr_i64s(crate::wire::batch::attr::args)?;
    let ret_map = f.attr_i64s(crate::wire::batch::attr::rets)?;
    if ops.len() > MAX_MEMBERS {
        return Err(RtError::value(format!("mosaic_rt_batch: more than {MAX_MEMBERS} members")));
    }
    if f.num_attrs() > MAX_ATTRS + 3 {
        return Err(RtError::value(format!("mosaic_rt_batch: more than {MAX_ATTRS} member attributes")));
    }
    let mut starts = [0u16; MAX_MEMBERS + 1];
    let starts = &mut starts[..ops.len() + 1];
    member_ranges(f, starts)?;
    let _pinned = crate::launch::batch_scope();
    let (mut a, mut r) = (0usize, 0usize);
    for (k, &code) in ops.iter().enumerate() {
        let (name, body) = usize::try_from(code)
            .ok()
            .and_then(|i| MEMBERS.get(i))
            .copied()
            .ok_or_else(|| RtError::value(format!("mosaic_rt_batch: unknown member op code {code}")))?;
        let args = take_indices(arg_map, &mut a, MAX_MEMBER_ARGS, "args")?;
        let rets = take_indices(ret_map, &mut r, MAX_MEMBER_RETS, "rets")?;
        let attrs = usize::from(starts[k])..usize::from(starts[k + 1]);
        run_member(c, name, body, args, rets, attrs)?;
    }
    if a != arg_map.len() || r != ret_map.len() {
        return Err(RtError::value("mosaic_rt_batch: attributes `args` / `rets` have entries left over"));
    }
    Ok(())
}

/// The next member's index list of `map` (count, then indices) from `*at`.
fn take_indices<'m>(map: &'m [i64], at: &mut usize, max: usize, what: &str) -> Result<&'m [i64]> {
    let n = map.get(*at).and_then(|&n| usize::try_from(n).ok()).filter(|&n| n <= max);
    let Some(n) = n.filter(|&n| *at + 1 + n <= map.len()) else {
        return Err(RtError::value(format!("mosaic_rt_batch: attribute `{what}` is malformed")));
    };
    let out = &map[*at + 1..*at + 1 + n];
    *at += 1 + n;
    Ok(out)
}

/// The member index of an attribute name `m{k}_...` (any number of
/// digits: for messages about misplaced ones).
fn member_of(name: &[u8]) -> Option<usize> {
    let digits = name.strip_prefix(b"m")?;
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || n > 9 || digits.get(n) != Some(&b'_') {
        return None;
    }
    Some(digits[..n].iter().fold(0usize, |k, d| k * 10 + usize::from(d - b'0')))
}

/// Whether `name` starts with member `k`'s prefix (`k` has
/// [`MEMBER_DIGITS`] digits).
#[inline]
fn has_prefix(name: &[u8], k: usize) -> bool {
    let Some(p) = name.get(..PREFIX) else { return false };
    let mut rest = k;
    for i in (1..=MEMBER_DIGITS).rev() {
        if p[i] != b'0' + (rest % 10) as u8 {
            return false;
        }
        rest /= 10;
    }
    p[0] == b'm' && p[PREFIX - 1] == b'_'
}

/// Member k's attributes are the batch's `starts[k]..starts[k + 1]`: XLA
/// hands attributes over sorted by name, so with equal-width indices each
/// member's are one run, in member order. Every other attribute must not
/// look like a member's (an index of another width or out of range).
fn member_ranges(f: &Frame, starts: &mut [u16]) -> Result<()> {
    let (n, members) = (f.num_attrs(), starts.len() - 1);
    let name = |i: usize| f.attr_entry(i).map_or(&[][..], |(_, key, _)| key);
    let mut i = 0;
    while i < n && member_of(name(i)).is_none() {
        i += 1;
    }
    for (k, start) in starts[..members].iter_mut().enumerate() {
        *start = i as u16; // i <= n <= MAX_ATTRS + 3 < 2**16
        while i < n && has_prefix(name(i), k) {
            i += 1;
        }
    }
    starts[members] = i as u16;
    for j in (0..n).filter(|&j| j < usize::from(starts[0]) || j >= i) {
        if let Some(k) = member_of(name(j)) {
            return Err(RtError::value(format!(
                "mosaic_rt_batch: attribute {:?} of member {k} is out of place (the batch has {members} members, \
                 their attributes named m{{k}}_{{name}} with {MEMBER_DIGITS}-digit k)",
                String::from_utf8_lossy(name(j))
            )));
        }
    }
    Ok(())
}

fn run_member(
    c: &mut Call,
    name: &'static str,
    body: Body,
    args: &[i64],
    rets: &[i64],
    attrs: std::ops::Range<usize>,
) -> Result<()> {
    let f = &c.frame;
    let mut arg_types = [0i32; MAX_MEMBER_ARGS];
    let mut arg_ptrs = [std::ptr::null_mut::<c_void>(); MAX_MEMBER_ARGS];
    for (j, &i) in args.iter().enumerate() {
        // `-j`: the batch's result j, an earlier member's (see the module doc).
        let entry = match usize::try_from(i) {
            Ok(i) => f.arg_entry(i),
            Err(_) => usize::try_from(i.unsigned_abs()).ok().filter(|&r| r >= 1).and_then(|r| f.ret_entry(r)),
        };
        (arg_types[j], arg_ptrs[j]) = entry.ok_or_else(|| bad_index(name, "operand", i))?;
    }
    let mut ret_types = [0i32; MAX_MEMBER_RETS];
    let mut ret_ptrs = [std::ptr::null_mut::<c_void>(); MAX_MEMBER_RETS];
    for (j, &i) in rets.iter().enumerate() {
        let entry = usize::try_from(i).ok().and_then(|i| f.ret_entry(i));
        (ret_types[j], ret_ptrs[j]) = entry.ok_or_else(|| bad_index(name, "result", i))?;
    }
    let raw = f.raw;
    // The member's attributes are a run of the batch's own arrays (see
    // `member_ranges`), which hold `num_attrs()` entries or are null (then
    // the range is empty).
    let at = &raw.attrs;
    let start = if attrs.is_empty() { 0 } else { attrs.start };
    let frame = CallFrame {
        struct_size: raw.struct_size,
        extension_start: std::ptr::null_mut(),
        api: raw.api,
        ctx: raw.ctx,
        stage: raw.stage,
        args: abi::Args {
            struct_size: raw.args.struct_size,
            extension_start: std::ptr::null_mut(),
            size: args.len() as i64,
            types: arg_types.as_mut_ptr(),
            args: arg_ptrs.as_mut_ptr(),
        },
        rets: abi::Rets {
            struct_size: raw.rets.struct_size,
            extension_start: std::ptr::null_mut(),
            size: rets.len() as i64,
            types: ret_types.as_mut_ptr(),
            rets: ret_ptrs.as_mut_ptr(),
        },
        attrs: abi::Attrs {
            struct_size: at.struct_size,
            extension_start: std::ptr::null_mut(),
            size: attrs.len() as i64,
            types: at.types.wrapping_add(start),
            names: at.names.wrapping_add(start),
            attrs: at.attrs.wrapping_add(start),
        },
        future: raw.future,
    };
    c.run_member(&frame, PREFIX, name, body)
}

#[cold]
fn bad_index(op: &str, what: &str, i: i64) -> RtError {
    RtError::value(format!("mosaic_rt_batch: {op}'s {what} index {i} is out of range"))
}
