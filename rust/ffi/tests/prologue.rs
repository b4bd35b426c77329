//! `launch_begin` (join, allocations, barrier in one call) and
//! `kernel_end`'s leak report, with fake XLA call frames.

use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::FakeCall;
use std::sync::atomic::{AtomicI64, Ordering};

static NEXT_UID: AtomicI64 = AtomicI64::new(3 << 40);

const HBM: i64 = 5;
const VMEM: i64 = 0;

/// A one-device launch prologue call: its kernel_begin attributes, no items.
fn prologue() -> FakeCall {
    FakeCall::new()
        .arg_i32(0)
        .arg_i32(0)
        .ret_i32()
        .ret(abi::DT_U32, &[2], 8)
        .attr_i64("uid", NEXT_UID.fetch_add(1, Ordering::Relaxed))
        .attr_i64("num_devices", 1)
        .attr_i64("num_cores", 1)
        .attr_str("dma_execution_mode", "on_wait")
        .attr_str("out_of_bounds_reads", "raise")
        .attr_str("uninitialized_memory", "zero")
        .attr_i64("wait_timeout_ms", 5000)
        .attr_i64("barrier", 1)
}

fn handle(c: &FakeCall) -> [u32; 2] {
    let b = c.ret_bytes(1);
    [u32::from_le_bytes(b[0..4].try_into().unwrap()), u32::from_le_bytes(b[4..8].try_into().unwrap())]
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Items: an HBM buffer initialised from operand 2 (logical shape given),
/// a VMEM buffer of the fill value, then a 2x3 array of DMA semaphores.
fn three_items(c: FakeCall) -> FakeCall {
    c.arg(abi::DT_F32, &[4], [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect())
        .ret_i32()
        .ret_i32()
        .ret(abi::DT_S32, &[2, 3], 24)
        .attr_i64s("item_kinds", &[0, 0, 1])
        .attr_i64s("item_flags", &[1 | 8, 0, 0])
        .attr_i64s("item_spaces", &[HBM, VMEM, 0])
        .attr_i64s("item_ranks", &[1, 2, 2])
        .attr_i64s("item_shapes", &[4, 8, 128, 2, 3])
        .attr_i64s("item_logical", &[4])
        .attr_str("item_types", "float32\u{1f}float32\u{1f}dma")
}

#[test]
fn one_call_joins_allocates_and_returns_every_id() {
    let mut c = three_items(prologue());
    c.call(h::launch_begin).unwrap();
    let (a, b) = (c.ret_i32_value(2), c.ret_i32_value(3));
    assert_ne!(a, b);
    let sems = i32s(c.ret_bytes(4));
    assert_eq!(sems.len(), 6);
    assert!(sems.windows(2).all(|w| w[1] == w[0] + 1), "one consecutive run: {sems:?}");
    // The buffers exist: the initialised one reads back its init value.
    let mut load = FakeCall::new()
        .arg_i32(0)
        .arg_handle(handle(&c))
        .arg_i32(0)
        .arg_i32(0)
        .arg_i32(a)
        .arg_i32s(&[])
        .ret_i32()
        .ret(abi::DT_F32, &[4], 16)
        .attr_i64("space", HBM)
        .attr_i64s("sizes", &[])
        .attr_i64s("strides", &[])
        .attr_i64s("squeezed", &[]);
    load.call(h::load).unwrap();
    assert_eq!(load.ret_bytes(1), [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>());
    let end = FakeCall::new().arg_i32(0).arg_handle(handle(&c)).arg_i32(0).ret_i32();
    end.attr_str("leak_policy", "raise").call(h::kernel_end).unwrap();
}

#[test]
fn kernel_end_with_a_leak_policy_raises_on_a_leak() {
    let mut c = three_items(prologue());
    c.call(h::launch_begin).unwrap();
    let sem = i32s(c.ret_bytes(4))[0];
    let signal = |inc: i32| {
        FakeCall::new()
            .arg_i32(0)
            .arg_handle(handle(&c))
            .arg_i32(0)
            .arg_i32(0)
            .arg_i32(sem)
            .arg_i32(inc)
            .arg_i32(-1)
            .arg_i32(-1)
            .ret_i32()
            .call(h::semaphore_signal)
    };
    signal(2).unwrap();
    let e = FakeCall::new()
        .arg_i32(0)
        .arg_handle(handle(&c))
        .arg_i32(0)
        .ret_i32()
        .attr_str("leak_policy", "raise")
        .call(h::kernel_end)
        .unwrap_err();
    assert!(e.contains("SemaphoreLeakError") && e.contains("has count 2"), "{e}");
}

#[test]
fn malformed_items_are_value_errors_naming_the_op() {
    let item = |shapes: &[i64], id_result: bool| {
        let c = prologue().arg(abi::DT_F32, &[4], vec![0; 16]);
        let c = if id_result { c.ret_i32() } else { c };
        c.attr_i64s("item_kinds", &[0])
            .attr_i64s("item_flags", &[1])
            .attr_i64s("item_spaces", &[HBM])
            .attr_i64s("item_ranks", &[1])
            .attr_i64s("item_shapes", shapes)
            .attr_i64s("item_logical", &[])
            .attr_str("item_types", "float32")
    };
    let msg = item(&[4, 4], true).call(h::launch_begin).unwrap_err();
    assert!(msg.contains("mosaic_rt_launch_begin: item_shapes has values past its lengths"), "{msg}");
    let msg = item(&[4], false).call(h::launch_begin).unwrap_err();
    assert!(msg.contains("mosaic_rt_launch_begin: expected 3 operand(s) and 3 result(s), got 3 and 2"), "{msg}");
}

/// Items: an HBM input of 16x128 float32 (from operand 2) and the VMEM
/// buffer of its 8x128 block, then a semaphore; core 0's grid loop over a
/// grid of 2 copying that block (`block_items`: which items hold it).
fn with_grid(block_items: &[i64]) -> FakeCall {
    prologue()
        .arg(abi::DT_F32, &[16, 128], vec![0; 16 * 128 * 4])
        .ret_i32()
        .ret_i32()
        .ret_i32()
        .ret(abi::DT_PRED, &[], 1)
        .ret_i32()
        .ret_i32()
        .attr_i64s("item_kinds", &[0, 0, 1])
        .attr_i64s("item_flags", &[1, 0, 0])
        .attr_i64s("item_spaces", &[HBM, VMEM, 0])
        .attr_i64s("item_ranks", &[2, 2, 0])
        .attr_i64s("item_shapes", &[16, 128, 8, 128])
        .attr_i64s("item_logical", &[])
        .attr_str("item_types", "float32\u{1f}float32\u{1f}regular")
        .attr_i64s("grid", &[2])
        .attr_i64s("order", &[])
        .attr_i64s("order_lens", &[0])
        .attr_i64("iters_per_core", 2)
        .attr_i64("num_iterations", 2)
        .attr_i64s("block_outputs", &[0])
        .attr_i64s("block_spaces", &[VMEM])
        .attr_i64s("block_ranks", &[2])
        .attr_i64s("block_sizes", &[8, 128])
        .attr_i64s("block_squeezed", &[0, 0])
        .attr_i64s("block_factors", &[8, 1])
        .attr_str("block_names", "x")
        .attr_i64s("revisit", &[])
        .attr_i64s("block_items", block_items)
}

#[test]
fn the_prologue_begins_core_0s_grid_loop() {
    let mut c = with_grid(&[0, 1]);
    c.call(h::launch_begin).unwrap();
    assert_eq!(c.ret_bytes(5), [1], "the first step runs");
    assert_eq!((c.ret_i32_value(6), c.ret_i32_value(7)), (0, 1), "points 0 then 1");
    // The loop is core 0's: its first copy-in reads the allocated buffers.
    let copy_in = FakeCall::new().arg_i32(0).arg_handle(handle(&c)).arg_i32(0).arg_i32(0);
    copy_in.arg_i32(0).arg_i32(0).ret_i32().call(h::grid_copy_in).unwrap();
    FakeCall::new().arg_i32(0).arg_handle(handle(&c)).arg_i32(0).ret_i32().call(h::kernel_end).unwrap();
}

#[test]
fn block_items_must_name_buffers() {
    let e = with_grid(&[0, 2]).call(h::launch_begin).unwrap_err();
    assert!(e.contains("mosaic_rt_launch_begin: block_items names item 2, not a buffer"), "{e}");
}
