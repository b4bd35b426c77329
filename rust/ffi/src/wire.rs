//! The wire contract of every native op, stated once: per FFI target its
//! fixed operands in order, its optional operands (present or not, in that
//! order, right after the fixed ones), what may follow them, its required
//! and optional attribute names; the region attribute keys and the
//! dynamic-start sentinel. The handlers (`crate::ops`) read operand
//! positions and attribute names from here (`wire::<op>::arg::<name>`,
//! `wire::<op>::attr::<name>`, positions computed from the table at compile
//! time); the binding exports the table (`_native.OP_LAYOUTS`) and the
//! Python wrappers (`mosaic_rt/ffi/ops.py`) build their calls from it.
//!
//! Packed integer attributes (bitfields) are declared by field name in
//! [`bitfields`] and re-exported here.
//!
//! May use: nothing but `core` (plain data).

mod bitfields;
pub use bitfields::{unpack, BitField, Bitfields, ViewMaps, ViewUnits, BITFIELDS};

/// One op's wire layout.
#[derive(Clone, Copy, Debug)]
pub struct OpLayout {
    /// The FFI target name (`mosaic_rt_<op>`).
    pub target: &'static str,
    /// The operands every call has, in order.
    pub operands: &'static [&'static str],
    /// Operands a call may add after the fixed ones, each at most once, in
    /// this order.
    pub optional_operands: &'static [&'static str],
    /// What may follow (empty: nothing; else a description of the variadic
    /// operands, e.g. trailing waits and region starts).
    pub rest: &'static str,
    /// Attributes every call has.
    pub attrs: &'static [&'static str],
    /// Attributes a call may have.
    pub optional_attrs: &'static [&'static str],
}

/// Position of `name` in `names` (a compile-time error when absent).
pub const fn position(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        if str_eq(names[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("name not in the op's layout");
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Which region of an op: names of its static attributes.
pub struct RegionAttrs {
    pub sizes: &'static str,
    pub strides: &'static str,
    pub squeezed: &'static str,
    /// Optional: per dim a static start, or [`DYNAMIC_START`] for the next
    /// entry of the start operand (which then holds only those).
    pub fixed: &'static str,
}

impl RegionAttrs {
    /// The keys, in the order the binding exports them.
    pub const fn keys(&self) -> [&'static str; 4] {
        [self.sizes, self.strides, self.squeezed, self.fixed]
    }
}

/// In a region's `fixed` starts attribute: "take this start from the operand".
pub const DYNAMIC_START: i64 = i64::MIN;

/// In a region's `sizes` attribute: "take this size from the operand" (a
/// `pl.ds(start, n)` of traced `n`, which DMAs allow). A region with one
/// always has the `fixed` attribute, and its operand holds its dynamic
/// starts, then its dynamic sizes, in dimension order.
pub const DYNAMIC_SIZE: i64 = i64::MIN;

/// The region of load / store / swap / check_revisit (no prefix).
pub const REGION: RegionAttrs =
    RegionAttrs { sizes: "sizes", strides: "strides", squeezed: "squeezed", fixed: "fixed" };
/// The source region of dma_start / copy_block.
pub const SRC_REGION: RegionAttrs =
    RegionAttrs { sizes: "src_sizes", strides: "src_strides", squeezed: "src_squeezed", fixed: "src_fixed" };
/// The destination region of dma_start / copy_block.
pub const DST_REGION: RegionAttrs =
    RegionAttrs { sizes: "dst_sizes", strides: "dst_strides", squeezed: "dst_squeezed", fixed: "dst_fixed" };

/// Every region key set, by prefix (`""`, `"src_"`, `"dst_"`).
pub const REGIONS: [(&str, &RegionAttrs); 3] = [("", &REGION), ("src_", &SRC_REGION), ("dst_", &DST_REGION)];

/// Attribute of an op whose regions pass some dynamic starts as trailing
/// scalar operands: how many there are (its last operands).
pub const TAIL_STARTS: &str = "tail_starts";

/// Attributes of an op's trailing waits (see `ops::dma`): their sizes and
/// sites; their semaphores are operands after the op's own.
pub const THEN_WAIT_BYTES: &str = "then_wait_bytes";
pub const THEN_WAIT_SITES: &str = "then_wait_sites";

/// The optional source-site attribute of most ops.
pub const SITE: &str = "site";

/// The common prefix of the ops on a launch: `token, handle, device[,
/// core]` (checked against every layout by a unit test).
pub const TOKEN: usize = 0;
pub const HANDLE: usize = 1;
pub const DEVICE: usize = 2;
pub const CORE: usize = 3;

/// Declares each op's module (`LAYOUT`, `arg::<operand>` positions,
/// `attr::<attribute>` names) and [`LAYOUTS`].
macro_rules! layouts {
    ($($op:ident {
        operands: [$($o:ident),* $(,)?],
        optional_operands: [$($oo:ident),* $(,)?],
        rest: $rest:literal,
        attrs: [$($a:ident),* $(,)?],
        optional_attrs: [$($oa:ident),* $(,)?] $(,)?
    })*) => {
        $(
            #[doc = concat!("The wire layout of `mosaic_rt_", stringify!($op), "`.")]
            pub mod $op {
                pub const LAYOUT: super::OpLayout = super::OpLayout {
                    target: concat!("mosaic_rt_", stringify!($op)),
                    operands: &[$(stringify!($o)),*],
                    optional_operands: &[$(stringify!($oo)),*],
                    rest: $rest,
                    attrs: &[$(stringify!($a)),*],
                    optional_attrs: &[$(stringify!($oa)),*],
                };
                /// Operand positions (an optional operand's when present).
                #[allow(non_upper_case_globals, dead_code)]
                pub mod arg {
                    use super::LAYOUT;
                    $(pub const $o: usize = crate::wire::position(LAYOUT.operands, stringify!($o));)*
                    $(pub const $oo: usize =
                        LAYOUT.operands.len() + crate::wire::position(LAYOUT.optional_operands, stringify!($oo));)*
                    /// The number of fixed operands.
                    pub const FIXED: usize = LAYOUT.operands.len();
                }
                /// Attribute names.
                #[allow(non_upper_case_globals, dead_code)]
                pub mod attr {
                    $(pub const $a: &str = stringify!($a);)*
                    $(pub const $oa: &str = stringify!($oa);)*
                }
            }
        )*
        /// Every op's layout.
        pub const LAYOUTS: &[OpLayout] = &[$($op::LAYOUT),*];
    };
}

layouts! {
    kernel_begin {
        operands: [token, device],
        optional_operands: [],
        rest: "",
        attrs: [uid, num_devices, num_cores, dma_execution_mode, out_of_bounds_reads,
                uninitialized_memory, wait_timeout_ms, detect_races],
        optional_attrs: [device_ordinals, on_race, detect_deadlocks, deadlock_idle_ms,
                         detect_uninitialized, trace_path, report_as_warnings, site,
                         device_processes],
    }
    launch_begin {
        operands: [token, device],
        optional_operands: [],
        rest: "the items' init operands, then the grid's dynamic bounds",
        attrs: [uid, num_devices, num_cores, dma_execution_mode, out_of_bounds_reads,
                uninitialized_memory, wait_timeout_ms, detect_races,
                item_kinds, item_flags, item_spaces, item_ranks, item_shapes, item_logical,
                item_types, barrier],
        optional_attrs: [device_ordinals, on_race, detect_deadlocks, deadlock_idle_ms,
                         detect_uninitialized, trace_path, report_as_warnings,
                         grid, order, order_lens, iters_per_core, num_iterations,
                         parallel_subgrid, grid_cores, block_outputs, block_spaces, block_ranks,
                         block_sizes, block_squeezed, block_factors, block_names, revisit,
                         block_items, site, device_processes],
    }
    kernel_end {
        operands: [token, handle, device],
        optional_operands: [],
        rest: "the borrowed inputs, then the direct outputs",
        attrs: [],
        optional_attrs: [leak_policy, site],
    }
    leak_report {
        operands: [token, handle, device],
        optional_operands: [],
        rest: "",
        attrs: [policy],
        optional_attrs: [site],
    }
    pending_reports {
        operands: [token],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    core_end {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [site],
    }
    device_barrier {
        operands: [token, handle, device],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [site],
    }
    sync_device_cores {
        operands: [token, handle, device],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [site],
    }
    launch_info {
        operands: [token],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    allocate_buffer {
        operands: [token, handle, device, core],
        optional_operands: [init],
        rest: "",
        attrs: [space, dtype, shape],
        optional_attrs: [logical_shape, borrow, direct, site],
    }
    free_buffer {
        operands: [token, handle, device, core, buffer_id],
        optional_operands: [],
        rest: "",
        attrs: [space],
        optional_attrs: [site],
    }
    load {
        operands: [token, handle, device, core, buffer_id, starts],
        optional_operands: [mask],
        rest: "the region's trailing starts",
        attrs: [space, sizes, strides, squeezed],
        optional_attrs: [fixed, tail_starts, site],
    }
    store {
        operands: [token, handle, device, core, buffer_id, starts, value],
        optional_operands: [],
        rest: "the region's trailing starts",
        attrs: [space, sizes, strides, squeezed],
        optional_attrs: [fixed, tail_starts, site],
    }
    swap {
        operands: [token, handle, device, core, buffer_id, starts, value],
        optional_operands: [mask],
        rest: "the region's trailing starts",
        attrs: [space, sizes, strides, squeezed],
        optional_attrs: [fixed, tail_starts, splat, site],
    }
    allocate_semaphores {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "",
        attrs: [kind, count],
        optional_attrs: [site],
    }
    barrier_semaphore {
        operands: [token, handle, device],
        optional_operands: [],
        rest: "",
        attrs: [collective_id],
        optional_attrs: [site],
    }
    semaphore_signal {
        operands: [token, handle, device, core, sem, inc, target_device, target_core],
        optional_operands: [],
        rest: "",
        attrs: [has_target_device, has_target_core],
        optional_attrs: [wrap_negative, site],
    }
    semaphore_wait {
        operands: [token, handle, device, core, sem, value],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [decrement, site],
    }
    semaphore_read {
        operands: [token, handle, device, core, sem],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [take, site],
    }
    dma_start {
        operands: [token, handle, device, core, src_id, src_starts, dst_id, dst_starts, dst_sem,
                   src_sem, dst_device],
        optional_operands: [dst_core],
        rest: "the trailing waits' semaphores, then the regions' trailing starts, then the view maps",
        attrs: [src_space, dst_space, has_dst_device, has_dst_core,
                src_sizes, src_strides, src_squeezed, dst_sizes, dst_strides, dst_squeezed],
        optional_attrs: [src_fixed, dst_fixed, then_wait_bytes, then_wait_sites, tail_starts, view_maps, view_units,
                         plan_key, site],
    }
    dma_wait {
        operands: [token, handle, device, core, sem],
        optional_operands: [],
        rest: "the trailing waits' semaphores",
        attrs: [bytes],
        optional_attrs: [then_wait_bytes, then_wait_sites, site],
    }
    copy_block {
        operands: [token, handle, device, core, src_id, src_starts, dst_id, dst_starts,
                   block_indices, grid_point],
        optional_operands: [],
        rest: "",
        attrs: [src_space, dst_space, direction, arg_name,
                src_sizes, src_strides, src_squeezed, dst_sizes, dst_strides, dst_squeezed],
        optional_attrs: [src_fixed, dst_fixed, site],
    }
    check_revisit {
        operands: [token, handle, device, core, loop_idx, starts],
        optional_operands: [],
        rest: "",
        attrs: [ranks, sizes, strides, squeezed],
        optional_attrs: [fixed, site],
    }
    grid_begin {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "per block its HBM and kernel buffer ids, then the dynamic grid bounds",
        attrs: [grid, order, order_lens, block_outputs, block_spaces, block_ranks, block_sizes,
                block_squeezed, block_factors, block_names, revisit],
        optional_attrs: [iters_per_core, num_iterations, parallel_subgrid, grid_cores, site],
    }
    grid_copy_in {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "the input blocks' indices",
        attrs: [],
        optional_attrs: [site],
    }
    grid_copy_out {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "the output blocks' indices in this step, then in the next",
        attrs: [],
        optional_attrs: [site],
    }
    prng_seed {
        operands: [token, handle, device, core, seeds],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    prng_random_bits {
        operands: [token, handle, device, core],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    grid_step {
        operands: [token, handle, device, core, indices],
        optional_operands: [],
        rest: "",
        attrs: [phase],
        optional_attrs: [],
    }
    wrap_target {
        operands: [device, core],
        optional_operands: [],
        rest: "",
        attrs: [num_devices, num_cores],
        optional_attrs: [],
    }
    iota_ids {
        operands: [first],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    scalar_program {
        operands: [],
        optional_operands: [],
        rest: "the program's operands",
        attrs: [program],
        optional_attrs: [fingerprint],
    }
    vector_program {
        operands: [],
        optional_operands: [],
        rest: "the program's operands",
        attrs: [program],
        optional_attrs: [fingerprint],
    }
    threefry2x32 {
        operands: [k0, k1, x0, x1],
        optional_operands: [],
        rest: "",
        attrs: [],
        optional_attrs: [],
    }
    batch {
        operands: [token],
        optional_operands: [],
        rest: "the members' operands, each without its token",
        attrs: [ops, args, rets],
        optional_attrs: [],
    }
}

/// The layout of target `name`, if it is an op.
pub fn layout(target: &str) -> Option<&'static OpLayout> {
    LAYOUTS.iter().find(|l| l.target == target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_handler_has_a_layout_and_every_layout_a_handler() {
        let handlers: HashSet<&str> = crate::handlers().into_iter().map(|(n, _)| n).collect();
        let layouts: HashSet<&str> = LAYOUTS.iter().map(|l| l.target).collect();
        assert_eq!(handlers, layouts);
        assert_eq!(layouts.len(), LAYOUTS.len(), "an op listed twice");
    }

    #[test]
    fn names_are_unique_within_an_op() {
        for l in LAYOUTS {
            let operands: Vec<_> = l.operands.iter().chain(l.optional_operands).collect();
            assert_eq!(operands.iter().collect::<HashSet<_>>().len(), operands.len(), "{}", l.target);
            let attrs: Vec<_> = l.attrs.iter().chain(l.optional_attrs).collect();
            assert_eq!(attrs.iter().collect::<HashSet<_>>().len(), attrs.len(), "{}", l.target);
        }
    }

    #[test]
    fn ops_with_a_region_list_all_its_keys() {
        for l in LAYOUTS {
            for (_, r) in REGIONS {
                if l.attrs.contains(&r.sizes) {
                    assert!(l.attrs.contains(&r.strides) && l.attrs.contains(&r.squeezed), "{}", l.target);
                    assert!(l.optional_attrs.contains(&r.fixed), "{}", l.target);
                }
            }
            if l.optional_attrs.contains(&THEN_WAIT_BYTES) {
                assert!(l.optional_attrs.contains(&THEN_WAIT_SITES), "{}", l.target);
            }
        }
    }

    #[test]
    fn launch_begin_takes_kernel_begin_and_grid_begin_attributes() {
        // `ops::launch_begin` decodes them with those ops' names.
        let lb = launch_begin::LAYOUT;
        let has = |a: &&str| lb.attrs.contains(a) || lb.optional_attrs.contains(a);
        for a in kernel_begin::LAYOUT.attrs.iter().chain(kernel_begin::LAYOUT.optional_attrs) {
            assert!(has(a), "{a}");
        }
        for a in grid_begin::LAYOUT.attrs.iter().chain(grid_begin::LAYOUT.optional_attrs) {
            assert!(lb.optional_attrs.contains(a), "{a}");
        }
    }

    #[test]
    fn launch_ops_share_the_prefix() {
        for l in LAYOUTS {
            let o = l.operands;
            if o.contains(&"handle") {
                assert_eq!(&o[..3], ["token", "handle", "device"], "{}", l.target);
                assert_eq!(position(o, "handle"), HANDLE);
                assert_eq!(position(o, "device"), DEVICE);
                if o.contains(&"core") {
                    assert_eq!(position(o, "core"), CORE, "{}", l.target);
                }
            }
            if o.contains(&"token") {
                assert_eq!(position(o, "token"), TOKEN, "{}", l.target);
            }
        }
    }

    #[test]
    fn positions_follow_the_table() {
        // The handlers read these consts; a spot check that the macro
        // numbers fixed and optional operands as the table lists them.
        assert_eq!(dma_start::arg::src_id, 4);
        assert_eq!(dma_start::arg::dst_device, 10);
        assert_eq!(dma_start::arg::dst_core, 11);
        assert_eq!(swap::arg::mask, 7);
        assert_eq!(load::arg::mask, 6);
        assert_eq!(allocate_buffer::arg::init, 4);
        for l in LAYOUTS {
            for (i, name) in l.operands.iter().enumerate() {
                assert_eq!(position(l.operands, name), i);
            }
        }
    }
}
