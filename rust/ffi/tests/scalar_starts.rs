//! A region with one dynamic start may take it as an int32 scalar operand
//! (no reshape to a 1-vector in the program); other ranks are refused.

use mosaic_rt_core::DType;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::dtype_to_xla;
use mosaic_rt_ffi::testing::{begin_single_device, core_call, FakeCall};

const VMEM: i64 = 0;
const ROWS: usize = 4;
const LANES: usize = 8;

/// A (ROWS, LANES) f32 buffer holding 0, 1, 2, ... in C order.
fn alloc(handle: [u32; 2]) -> i32 {
    let data: Vec<u8> = (0..ROWS * LANES).flat_map(|k| (k as f32).to_ne_bytes()).collect();
    let mut c = core_call(handle)
        .arg(dtype_to_xla(DType::F32), &[ROWS as i64, LANES as i64], data)
        .ret_i32()
        .ret_i32()
        .attr_i64("space", VMEM)
        .attr_str("dtype", "float32")
        .attr_i64s("shape", &[ROWS as i64, LANES as i64]);
    c.call(h::allocate_buffer).unwrap();
    c.ret_i32_value(1)
}

/// Loads one row (squeezed) of the call `starts` (buffer id and start operands).
fn load_row(starts: FakeCall) -> Result<Vec<f32>, String> {
    let mut c = starts
        .ret_i32()
        .ret(dtype_to_xla(DType::F32), &[LANES as i64], LANES * 4)
        .attr_i64("space", VMEM)
        .attr_i64s("sizes", &[1])
        .attr_i64s("strides", &[1])
        .attr_i64s("squeezed", &[1]);
    c.call(h::load)?;
    Ok(c.ret_bytes(1).chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[test]
fn a_scalar_start_is_one_start() {
    let handle = begin_single_device("zero");
    let id = alloc(handle);
    let vector = load_row(core_call(handle).arg_i32(id).arg_i32s(&[2])).unwrap();
    let scalar = load_row(core_call(handle).arg_i32(id).arg_i32(2)).unwrap();
    assert_eq!(vector, scalar);
    assert_eq!(scalar, (16..24).map(|k| k as f32).collect::<Vec<_>>());
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end).unwrap();
}

#[test]
fn starts_of_rank_two_are_refused() {
    let handle = begin_single_device("zero");
    let id = alloc(handle);
    let c = core_call(handle).arg_i32(id).arg(dtype_to_xla(DType::I32), &[1, 1], 2i32.to_ne_bytes().to_vec());
    let err = load_row(c).unwrap_err();
    assert!(err.contains("must have rank 1"), "{err}");
}
