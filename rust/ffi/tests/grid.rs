//! The native grid loop ops (`grid_begin` / `grid_copy_in` / `grid_copy_out`)
//! with fake XLA call frames: a 1-D grid copying rows of an HBM input into
//! VMEM and back out, the loop's `go` / grid point results, and stock's
//! revisit error.

use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::{begin_single_device, core_call, FakeCall};

const VMEM: i64 = 0;
const HBM: i64 = 5;

fn begin() -> [u32; 2] {
    begin_single_device("zero")
}

fn words(xs: &[i32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn alloc(handle: [u32; 2], space: i64, shape: &[i64], init: Option<&[i32]>) -> i32 {
    let mut c = core_call(handle);
    if let Some(init) = init {
        c = c.arg(abi::DT_S32, shape, words(init));
    }
    let mut c = c.ret_i32().ret_i32().attr_i64("space", space).attr_str("dtype", "int32").attr_i64s("shape", shape);
    c.call(h::allocate_buffer).unwrap();
    c.ret_i32_value(1)
}

fn load_all(handle: [u32; 2], space: i64, id: i32, n: usize) -> Vec<i32> {
    let mut c = core_call(handle)
        .arg_i32(id)
        .arg_i32s(&[])
        .ret_i32()
        .ret(abi::DT_S32, &[n as i64], 4 * n)
        .attr_i64("space", space)
        .attr_i64s("sizes", &[])
        .attr_i64s("strides", &[])
        .attr_i64s("squeezed", &[]);
    c.call(h::load).unwrap();
    c.ret_bytes(1).chunks(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect()
}

/// (go, points) of a call whose results are token, go, then int32 points.
fn step_results(c: &FakeCall, points: usize) -> (bool, Vec<i32>) {
    (c.ret_bytes(1)[0] != 0, (0..points).map(|k| c.ret_i32_value(2 + k)).collect())
}

/// A grid of `n` over rows of a (4, 2) int32 array: block (1, 2), input
/// index map `i -> (i, 0)`, output index map `out_rows[i]`.
fn run(n: usize, out_rows: &[i32]) -> Result<Vec<i32>, String> {
    let handle = begin();
    let x: Vec<i32> = (0..8).collect();
    let hin = alloc(handle, HBM, &[4, 2], Some(&x));
    let hout = alloc(handle, HBM, &[4, 2], Some(&[-1; 8]));
    let vin = alloc(handle, VMEM, &[1, 2], None);
    let vout = alloc(handle, VMEM, &[1, 2], None);
    let mut c = core_call(handle)
        .arg_i32(hin)
        .arg_i32(vin)
        .arg_i32(hout)
        .arg_i32(vout)
        .ret_i32()
        .ret(abi::DT_PRED, &[], 1)
        .ret_i32()
        .ret_i32()
        .attr_i64s("grid", &[n as i64])
        .attr_i64s("order", &[])
        .attr_i64s("order_lens", &[0])
        .attr_i64("iters_per_core", n as i64)
        .attr_i64("num_iterations", n as i64)
        .attr_i64s("block_outputs", &[0, 1])
        .attr_i64s("block_spaces", &[VMEM, VMEM])
        .attr_i64s("block_ranks", &[2, 2])
        .attr_i64s("block_sizes", &[1, 2, 1, 2])
        .attr_i64s("block_squeezed", &[0, 0, 0, 0])
        .attr_i64s("block_factors", &[1, 2, 1, 2])
        .attr_str("block_names", "x\u{1f}o")
        .attr_i64s("revisit", &[1]);
    c.call(h::grid_begin)?;
    let (mut go, p) = step_results(&c, 2);
    assert!(go);
    assert_eq!(p, vec![0, 1 % n as i32]);
    let (mut point, mut next) = (p[0], p[1]);
    let mut steps = 0;
    while go {
        core_call(handle).arg_i32(point).arg_i32(0).ret_i32().call(h::grid_copy_in)?;
        // The "kernel": out block = in block.
        let row = load_all(handle, VMEM, vin, 2);
        core_call(handle)
            .arg_i32(vout)
            .arg_i32s(&[])
            .arg(abi::DT_S32, &[1, 2], words(&row))
            .ret_i32()
            .attr_i64("space", VMEM)
            .attr_i64s("sizes", &[])
            .attr_i64s("strides", &[])
            .attr_i64s("squeezed", &[])
            .call(h::store)?;
        let cur = out_rows[point as usize];
        let nxt = out_rows[next as usize];
        let mut c = core_call(handle)
            .arg_i32(cur)
            .arg_i32(0)
            .arg_i32(nxt)
            .arg_i32(0)
            .ret_i32()
            .ret(abi::DT_PRED, &[], 1)
            .ret_i32();
        c.call(h::grid_copy_out)?;
        let (g, after) = step_results(&c, 1);
        go = g;
        point = next;
        next = after[0];
        steps += 1;
    }
    assert_eq!(steps, n);
    let out = load_all(handle, HBM, hout, 8);
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end)?;
    Ok(out)
}

#[test]
fn blocks_go_in_and_out_as_the_index_maps_say() {
    assert_eq!(run(4, &[0, 1, 2, 3]).unwrap(), (0..8).collect::<Vec<_>>());
    // Rows 0 and 1 to output row 0 (written twice in a row: the last wins),
    // rows 2 and 3 to output row 3.
    assert_eq!(run(4, &[0, 0, 3, 3]).unwrap(), vec![2, 3, -1, -1, -1, -1, 6, 7]);
}

#[test]
fn coming_back_to_an_output_block_is_stocks_error() {
    let e = run(3, &[0, 1, 0]).unwrap_err();
    assert!(
        e.contains("Revisited block (slice(0, 1, 1), slice(0, 2, 1)) of output 0 in iteration (2,). The block was previously visited in iterations (0,) through (0,) ."),
        "{e}"
    );
}

#[test]
fn steps_without_grid_begin_are_errors() {
    let handle = begin();
    let e = core_call(handle).ret_i32().call(h::grid_copy_in).unwrap_err();
    assert!(e.contains("without grid_begin"), "{e}");
}

fn wrap(device: i32, core: i32, devices: i64, cores: i64) -> (i32, i32) {
    let mut c = FakeCall::new()
        .arg_i32(device)
        .arg_i32(core)
        .ret_i32()
        .ret_i32()
        .attr_i64("num_devices", devices)
        .attr_i64("num_cores", cores);
    c.call(h::wrap_target).unwrap();
    (c.ret_i32_value(0), c.ret_i32_value(1))
}

#[test]
fn negative_signal_targets_wrap_through_the_global_core_id() {
    assert_eq!(wrap(-1, 0, 4, 1), (3, 0));
    assert_eq!(wrap(2, 1, 4, 2), (2, 1));
    assert_eq!(wrap(0, -1, 4, 2), (3, 1));
    assert_eq!(wrap(-1, 1, 4, 2), (3, 1));
    // Too negative to wrap once: unchanged, for the range check to name.
    assert_eq!(wrap(-5, 0, 4, 1), (-5, 0));
    assert_eq!(wrap(-2, 0, 1, 1), (-2, 0));
}

#[test]
fn regions_take_static_starts_from_an_attribute_and_dynamic_ones_from_the_operand() {
    let handle = begin();
    let x: Vec<i32> = (0..8).collect();
    let id = alloc(handle, VMEM, &[4, 2], Some(&x));
    let load = |fixed: &[i64], dynamic: &[i32]| {
        let mut c = core_call(handle)
            .arg_i32(id)
            .arg_i32s(dynamic)
            .ret_i32()
            .ret(abi::DT_S32, &[1, 1], 4)
            .attr_i64("space", VMEM)
            .attr_i64s("sizes", &[1, 1])
            .attr_i64s("strides", &[1, 1])
            .attr_i64s("squeezed", &[0, 0])
            .attr_i64s("fixed", fixed);
        c.call(h::load).map(|_| c.ret_i32_value(1))
    };
    assert_eq!(load(&[i64::MIN, 1], &[2]), Ok(5));
    assert_eq!(load(&[3, i64::MIN], &[0]), Ok(6));
    let e = load(&[i64::MIN, i64::MIN], &[1]).unwrap_err();
    assert!(e.contains("fixed starts"), "{e}");
}

#[test]
fn semaphore_id_arrays_count_up_from_the_first() {
    let mut c = FakeCall::new().arg_i32(2000).ret(abi::DT_S32, &[2, 3], 24);
    c.call(h::iota_ids).unwrap();
    let ids: Vec<i32> = c.ret_bytes(0).chunks(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(ids, vec![2000, 2001, 2002, 2003, 2004, 2005]);
}
