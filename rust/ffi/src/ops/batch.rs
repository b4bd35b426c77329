//! `batch`: a straight-line run of token-threaded ops as one custom call.
//!
//! XLA compiles every custom call on its own (~0.2 ms of a cold call inside
//! a shard_map) and runs each as a thunk. The memory, DMA and semaphore ops
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
//! * member k's own attribute `name` as `m{k}_{name}`.
//!
//! An operand index `-j` (j >= 1) is the batch's result j, which an
//! earlier member wrote: a row's `load -> vector program -> store` is one
//! call, its values never leaving the batch. Every buffer a frame gets is
//! still XLA's own, and a member's results are never its own operands (the
//! Python side refers only to earlier members' results).

use super::{dma, grid, interp, kernel, memory, sem, trace, vector};
use crate::abi::{self, ByteSpan, CallFrame};
use crate::dispatch::{Body, Call};
use crate::frame::Frame;
use mosaic_rt_core::{Result, RtError};
use std::cell::RefCell;
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
    ("mosaic_rt_copy_block", interp::copy_block),
    ("mosaic_rt_check_revisit", interp::check_revisit),
    ("mosaic_rt_prng_seed", interp::prng_seed),
    ("mosaic_rt_prng_random_bits", interp::prng_random_bits),
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
/// batch (the member frames are built on the stack, the attribute table
/// grows to the largest batch a thread ran; the Python side keeps within
/// these). A SparseCore trip of 128 rows' `load -> program -> store` is
/// ~400 members and ~2,000 attributes.
pub const MAX_MEMBERS: usize = 512;
pub const MAX_MEMBER_ARGS: usize = 32;
pub const MAX_MEMBER_RETS: usize = 8;
pub const MAX_ATTRS: usize = 4096;

/// The members' attributes, `(type, name without the prefix, value)`,
/// grouped by member: a counting sort of the batch's attributes, with no
/// assumption on their order.
#[derive(Default)]
struct MemberAttrs {
    types: Vec<i32>,
    spans: Vec<ByteSpan>,
    values: Vec<*mut c_void>,
    /// The name pointers of the member being run (into `spans`).
    names: Vec<*mut ByteSpan>,
    /// `starts[k]..starts[k + 1]`: member k's slots.
    starts: Vec<usize>,
}

thread_local! {
    /// Each thread's `MemberAttrs`, reused: allocating and zeroing fresh
    /// tables cost a tenth of a small launch's instructions. A batch never
    /// runs inside another (no member is a batch), and every slot a member
    /// reads is written by this call's `group` first.
    static SCRATCH: RefCell<MemberAttrs> = RefCell::new(MemberAttrs::default());
}

pub fn batch(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let ops = f.attr_i64s(crate::wire::batch::attr::ops)?;
    let arg_map = f.attr_i64s(crate::wire::batch::attr::args)?;
    let ret_map = f.attr_i64s(crate::wire::batch::attr::rets)?;
    if ops.len() > MAX_MEMBERS {
        return Err(RtError::value(format!("mosaic_rt_batch: more than {MAX_MEMBERS} members")));
    }
    SCRATCH.with(|cell| run_members(c, ops, arg_map, ret_map, &mut cell.borrow_mut()))
}

fn run_members(c: &mut Call, ops: &[i64], arg_map: &[i64], ret_map: &[i64], attrs: &mut MemberAttrs) -> Result<()> {
    attrs.group(&c.frame, ops.len())?;
    let (mut a, mut r) = (0usize, 0usize);
    for (k, &code) in ops.iter().enumerate() {
        let (name, body) = usize::try_from(code)
            .ok()
            .and_then(|i| MEMBERS.get(i))
            .copied()
            .ok_or_else(|| RtError::value(format!("mosaic_rt_batch: unknown member op code {code}")))?;
        let args = take_indices(arg_map, &mut a, MAX_MEMBER_ARGS, "args")?;
        let rets = take_indices(ret_map, &mut r, MAX_MEMBER_RETS, "rets")?;
        run_member(c, name, body, args, rets, attrs, k)?;
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

/// The member prefix `m{k}_` of an attribute name: `(k, prefix length)`.
fn member_of(name: &[u8]) -> Option<(usize, usize)> {
    let digits = name.strip_prefix(b"m")?;
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || n > 4 || digits.get(n) != Some(&b'_') {
        return None;
    }
    let k = digits[..n].iter().fold(0usize, |k, d| k * 10 + usize::from(d - b'0'));
    Some((k, n + 2))
}

impl MemberAttrs {
    fn group(&mut self, f: &Frame, members: usize) -> Result<()> {
        let n = f.num_attrs();
        if n > MAX_ATTRS + 3 {
            return Err(RtError::value(format!("mosaic_rt_batch: more than {MAX_ATTRS} member attributes")));
        }
        if self.types.len() < n {
            let empty = ByteSpan { ptr: std::ptr::null(), len: 0 };
            self.types.resize(n, 0);
            self.spans.resize(n, empty);
            self.values.resize(n, std::ptr::null_mut());
            self.names.resize(n, std::ptr::null_mut());
        }
        // Two passes over the names (count, then place): cheaper than
        // keeping each attribute's owner in another array.
        self.starts.clear();
        self.starts.resize(members + 1, 0);
        let counts = &mut self.starts;
        for i in 0..n {
            let Some((_, key, _)) = f.attr_entry(i) else { continue };
            if let Some((k, _)) = member_of(key) {
                if k >= members {
                    return Err(RtError::value(format!(
                        "mosaic_rt_batch: attribute of member {k}, but the batch has {members}"
                    )));
                }
                counts[k + 1] += 1;
            }
        }
        for k in 0..members {
            counts[k + 1] += counts[k];
        }
        // Placing member k's next attribute at `starts[k]` moves each start
        // to the next member's; shifted back one member below.
        for i in 0..n {
            let Some((ty, key, value)) = f.attr_entry(i) else { continue };
            let Some((k, skip)) = member_of(key) else { continue };
            let slot = self.starts[k];
            self.starts[k] += 1;
            self.types[slot] = ty;
            let rest = &key[skip..];
            self.spans[slot] = ByteSpan { ptr: rest.as_ptr().cast(), len: rest.len() };
            self.values[slot] = value;
        }
        self.starts.copy_within(0..members, 1);
        self.starts[0] = 0;
        Ok(())
    }
}

fn run_member(
    c: &mut Call,
    name: &'static str,
    body: Body,
    args: &[i64],
    rets: &[i64],
    attrs: &mut MemberAttrs,
    k: usize,
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
    let (from, to) = (attrs.starts[k], attrs.starts[k + 1]);
    for (slot, span) in attrs.names[from..to].iter_mut().zip(&mut attrs.spans[from..to]) {
        *slot = span;
    }
    let raw = f.raw;
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
            struct_size: raw.attrs.struct_size,
            extension_start: std::ptr::null_mut(),
            size: (to - from) as i64,
            types: attrs.types[from..].as_mut_ptr(),
            names: attrs.names[from..].as_mut_ptr(),
            attrs: attrs.values[from..].as_mut_ptr(),
        },
        future: raw.future,
    };
    c.run_member(&frame, name, body)
}

#[cold]
fn bad_index(op: &str, what: &str, i: i64) -> RtError {
    RtError::value(format!("mosaic_rt_batch: {op}'s {what} index {i} is out of range"))
}
