//! `batch`: a run of ops in one call behaves as the same ops called one by
//! one -- each member sees only its own operands, results and attributes,
//! and a member's error is its own op's error.

use mosaic_rt_core::DType;
use mosaic_rt_ffi::batch_members;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::dtype_to_xla;
use mosaic_rt_ffi::testing::{begin_single_device, core_call, FakeCall};

const VMEM: i64 = 0;
const N: usize = 8; // f32 elements per buffer

fn code(op: &str) -> i64 {
    batch_members().position(|name| name == format!("mosaic_rt_{op}")).expect("a batch member") as i64
}

fn f32s(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_ne_bytes).collect()
}

fn alloc(handle: [u32; 2], init: f32) -> i32 {
    let mut c = core_call(handle)
        .arg(dtype_to_xla(DType::F32), &[N as i64], f32s((0..N).map(|k| init + k as f32)))
        .ret_i32()
        .ret_i32()
        .attr_i64("space", VMEM)
        .attr_str("dtype", "float32")
        .attr_i64s("shape", &[N as i64]);
    c.call(h::allocate_buffer).unwrap();
    c.ret_i32_value(1)
}

/// `c` with member `k`'s whole-buffer region and `space`.
fn member_region(c: FakeCall, k: usize) -> FakeCall {
    c.attr_i64(&format!("m{k:03}_space"), VMEM)
        .attr_i64s(&format!("m{k:03}_sizes"), &[])
        .attr_i64s(&format!("m{k:03}_strides"), &[])
        .attr_i64s(&format!("m{k:03}_squeezed"), &[])
}

const OPS: fn() -> Vec<i64> = || vec![code("swap"), code("load")];
const ARGS: [i64; 15] = [7, 0, 1, 2, 3, 4, 5, 6, 6, 0, 1, 2, 3, 7, 5];
const RETS: [i64; 5] = [1, 0, 2, 0, 1];

/// A batch of `swap(a, value)` without its old value, then `load(b)`:
/// operands token, handle, device, core, a, starts, value, b.
fn swap_then_load(handle: [u32; 2], a: i32, b: i32, value: f32) -> FakeCall {
    batch_of(handle, a, b, value, (&OPS(), &ARGS, &RETS))
}

/// A batch's own attributes: `(ops, args, rets)`.
type BatchAttrs<'a> = (&'a [i64], &'a [i64], &'a [i64]);

/// As `swap_then_load`, with the batch's own attributes.
fn batch_of(handle: [u32; 2], a: i32, b: i32, value: f32, (ops, args, rets): BatchAttrs) -> FakeCall {
    let c = core_call(handle)
        .arg_i32(a)
        .arg_i32s(&[])
        .arg(dtype_to_xla(DType::F32), &[N as i64], f32s(std::iter::repeat_n(value, N)))
        .arg_i32(b)
        .ret_i32()
        .ret(dtype_to_xla(DType::F32), &[N as i64], N * 4)
        .attr_i64s("ops", ops)
        .attr_i64s("args", args)
        .attr_i64s("rets", rets);
    member_region(member_region(c, 0), 1)
}

fn loaded(c: &FakeCall) -> Vec<f32> {
    c.ret_bytes(1).chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn end(handle: [u32; 2]) {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end).unwrap();
}

#[test]
fn members_run_in_order_on_their_own_operands() {
    let handle = begin_single_device("zero");
    let (a, b) = (alloc(handle, 0.0), alloc(handle, 100.0));
    // The swap writes a, the load reads b: b's contents.
    let mut c = swap_then_load(handle, a, b, 7.0);
    c.call(h::batch).unwrap();
    assert_eq!(loaded(&c), (0..N).map(|k| 100.0 + k as f32).collect::<Vec<_>>());
    // Reading the buffer just written sees the write (program order).
    let mut c = swap_then_load(handle, a, a, 9.0);
    c.call(h::batch).unwrap();
    assert_eq!(loaded(&c), vec![9.0; N]);
    end(handle);
}

#[test]
fn a_member_error_is_its_own_op_error() {
    let handle = begin_single_device("zero");
    let a = alloc(handle, 0.0);
    let err = swap_then_load(handle, a, 12345, 1.0).call(h::batch).unwrap_err();
    // The same load alone (in a launch of its own) fails with the same words.
    let other = begin_single_device("zero");
    let mut alone = core_call(other)
        .arg_i32(12345)
        .arg_i32s(&[])
        .ret_i32()
        .ret(dtype_to_xla(DType::F32), &[N as i64], N * 4)
        .attr_i64("space", VMEM)
        .attr_i64s("sizes", &[])
        .attr_i64s("strides", &[])
        .attr_i64s("squeezed", &[]);
    let alone = alone.call(h::load).unwrap_err();
    let words = |e: &str| e.split_once("] ").map(|(_, m)| m.to_string()).unwrap_or_default();
    assert!(err.contains("ValueError") && err.contains("12345"), "{err}");
    assert_eq!(words(&err), words(&alone));
}

#[test]
fn a_masked_swap_without_its_old_value_writes_only_where_masked() {
    let handle = begin_single_device("zero");
    let a = alloc(handle, 0.0);
    let mask: Vec<u8> = (0..N).map(|k| u8::from(k % 2 == 0)).collect();
    let mut c = core_call(handle)
        .arg_i32(a)
        .arg_i32s(&[])
        .arg(dtype_to_xla(DType::F32), &[N as i64], f32s(std::iter::repeat_n(-1.0, N)))
        .arg(dtype_to_xla(DType::Bool), &[N as i64], mask)
        .ret_i32()
        .attr_i64("space", VMEM)
        .attr_i64s("sizes", &[])
        .attr_i64s("strides", &[])
        .attr_i64s("squeezed", &[]);
    c.call(h::swap).unwrap();
    let mut l = swap_then_load(handle, alloc(handle, 0.0), a, 0.0);
    l.call(h::batch).unwrap();
    let want: Vec<f32> = (0..N).map(|k| if k % 2 == 0 { -1.0 } else { k as f32 }).collect();
    assert_eq!(loaded(&l), want);
    end(handle);
}

#[test]
fn malformed_batches_are_value_errors() {
    let bad_code = [999, 0];
    let bad_arg = [7, 0, 1, 2, 3, 4, 5, 6, 6, 0, 1, 2, 3, 40, 5];
    let short_rets = [1, 0, 5, 0, 1];
    let ops = OPS();
    let cases: [(BatchAttrs, &str); 3] = [
        ((&bad_code, &ARGS, &RETS), "unknown member op code 999"),
        ((&ops, &bad_arg, &RETS), "operand index 40 is out of range"),
        ((&ops, &ARGS, &short_rets), "attribute `rets` is malformed"),
    ];
    for (attrs, want) in cases {
        let handle = begin_single_device("zero");
        let a = alloc(handle, 0.0);
        let err = batch_of(handle, a, a, 1.0, attrs).call(h::batch).unwrap_err();
        assert!(err.contains("ValueError") && err.contains(want), "{want}: {err}");
    }
    let handle = begin_single_device("zero");
    let a = alloc(handle, 0.0);
    // Member attributes are `m{k}_{name}` with 3-digit k: another width,
    // or a member the batch does not have, is misplaced.
    for (name, k) in [("m005_site", 5), ("m1_site", 1), ("m0001_site", 1)] {
        let err = swap_then_load(handle, a, a, 1.0).attr_i64(name, 1).call(h::batch).unwrap_err();
        let want = format!("attribute {name:?} of member {k} is out of place (the batch has 2 members");
        assert!(err.contains("ValueError") && err.contains(&want), "{name}: {err}");
    }
}

/// A batch of `load(a)`, then `store(b)` of what the load returned: the
/// store's value operand is `-1`, the batch's result 1.
fn load_then_store(handle: [u32; 2], a: i32, b: i32, store_args: &[i64]) -> FakeCall {
    let ops = [code("load"), code("store")];
    let mut args = vec![6, 0, 1, 2, 3, 4, 5];
    args.extend_from_slice(store_args);
    let c = core_call(handle)
        .arg_i32(a)
        .arg_i32s(&[])
        .arg_i32(b)
        .ret_i32()
        .ret(dtype_to_xla(DType::F32), &[N as i64], N * 4)
        .attr_i64s("ops", &ops)
        .attr_i64s("args", &args)
        .attr_i64s("rets", &[2, 0, 1, 1, 0]);
    member_region(member_region(c, 0), 1)
}

#[test]
fn a_member_reads_an_earlier_members_result_by_negative_index() {
    let handle = begin_single_device("zero");
    let (a, b) = (alloc(handle, 5.0), alloc(handle, 100.0));
    let mut c = load_then_store(handle, a, b, &[7, 0, 1, 2, 3, 6, 5, -1]);
    c.call(h::batch).unwrap();
    // b now holds a's contents: loading b returns them.
    let mut check = swap_then_load(handle, alloc(handle, 0.0), b, 0.0);
    check.call(h::batch).unwrap();
    assert_eq!(loaded(&check), (0..N).map(|k| 5.0 + k as f32).collect::<Vec<_>>());
    end(handle);
    // Index -2 names no result of this batch (it has one besides the token).
    let handle = begin_single_device("zero");
    let (a, b) = (alloc(handle, 5.0), alloc(handle, 100.0));
    let err = load_then_store(handle, a, b, &[7, 0, 1, 2, 3, 6, 5, -2]).call(h::batch).unwrap_err();
    assert!(err.contains("ValueError") && err.contains("operand index -2 is out of range"), "{err}");
}
