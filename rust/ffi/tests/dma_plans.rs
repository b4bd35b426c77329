//! `dma_start`'s `plan_key`: the static attributes of a call site are
//! parsed once per thread and kept under the key (a hash of them, made by
//! the Python side); a call without a well-formed key is parsed every time.

use mosaic_rt_core::DType;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::dtype_to_xla;
use mosaic_rt_ffi::testing::{begin_single_device, core_call, whole_region, FakeCall};

const VMEM: i64 = 0;
const N: usize = 8; // f32 elements per buffer
const BYTES: i64 = (N * 4) as i64;

fn alloc(handle: [u32; 2], init: f32) -> i32 {
    let data: Vec<u8> = (0..N).flat_map(|k| (init + k as f32).to_ne_bytes()).collect();
    let mut c = core_call(handle)
        .arg(dtype_to_xla(DType::F32), &[N as i64], data)
        .ret_i32()
        .ret_i32()
        .attr_i64("space", VMEM)
        .attr_str("dtype", "float32")
        .attr_i64s("shape", &[N as i64]);
    c.call(h::allocate_buffer).unwrap();
    c.ret_i32_value(1)
}

fn dma_sem(handle: [u32; 2]) -> i32 {
    let mut c = core_call(handle).ret_i32().ret_i32().attr_str("kind", "dma").attr_i64("count", 1);
    c.call(h::allocate_semaphores).unwrap();
    c.ret_i32_value(1)
}

fn sem_value(handle: [u32; 2], sem: i32) -> i32 {
    let mut c = core_call(handle).arg_i32(sem).ret_i32().ret_i32();
    c.call(h::semaphore_read).unwrap();
    c.ret_i32_value(1)
}

fn read(handle: [u32; 2], buf: i32) -> Vec<f32> {
    let mut c = core_call(handle)
        .arg_i32(buf)
        .arg_i32s(&[])
        .ret_i32()
        .ret(dtype_to_xla(DType::F32), &[N as i64], N * 4)
        .attr_i64("space", VMEM);
    c = whole_region(c, "");
    c.call(h::load).unwrap();
    c.ret_bytes(1).chunks(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect()
}

/// A local DMA src -> dst signalling `sem` and waiting for it (a trailing
/// wait), its source space `src_space` and its attributes keyed by `key`.
fn start(handle: [u32; 2], src: i32, dst: i32, sem: i32, src_space: i64, key: &[i64]) -> Result<(), String> {
    let mut c = core_call(handle)
        .arg_i32(src)
        .arg_i32s(&[])
        .arg_i32(dst)
        .arg_i32s(&[])
        .arg_i32(sem)
        .arg_i32(-1)
        .arg_i32(-1)
        .arg_i32(sem)
        .ret_i32()
        .attr_i64("src_space", src_space)
        .attr_i64("dst_space", VMEM)
        .attr_i64s("then_wait_bytes", &[BYTES])
        .attr_i64s("then_wait_sites", &[0]);
    if !key.is_empty() {
        c = c.attr_i64s("plan_key", key);
    }
    whole_region(whole_region(c, "src_"), "dst_").call(h::dma_start)
}

fn end(handle: [u32; 2]) -> Result<(), String> {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end)
}

#[test]
fn a_keyed_start_runs_as_an_unkeyed_one() {
    let handle = begin_single_device("zero");
    let (a, b, c, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), alloc(handle, 3.0), dma_sem(handle));
    let key = [0x1234, -77];
    start(handle, a, b, sem, VMEM, &key).unwrap();
    assert_eq!(read(handle, b), read(handle, a));
    assert_eq!(sem_value(handle, sem), 0, "the trailing wait ran");
    // A second call of the site (the plan kept): other operands, same effects.
    start(handle, c, a, sem, VMEM, &key).unwrap();
    assert_eq!(read(handle, a), read(handle, c));
    assert_eq!(sem_value(handle, sem), 0, "the kept plan's trailing wait ran");
    end(handle).unwrap();
}

#[test]
fn a_kept_plan_is_found_by_its_key_alone() {
    // Equal keys mean equal attributes (the Python side hashes every one):
    // a call with a kept key does not read its attributes again. A
    // malformed source space under that key shows it; under another key,
    // or without one, it is parsed and named.
    let handle = begin_single_device("zero");
    let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
    let key = [99, 0x5eed];
    start(handle, a, b, sem, VMEM, &key).unwrap();
    start(handle, a, b, sem, 77, &key).unwrap();
    end(handle).unwrap();
    for other in [&[100, 0x5eed][..], &[], &[99, 0x5eed, 1]] {
        let handle = begin_single_device("zero");
        let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
        let err = start(handle, a, b, sem, 77, other).unwrap_err();
        assert!(err.contains("77"), "key {other:?}: {err}");
        assert!(end(handle).is_err(), "the call was bound to its launch, which failed with it");
    }
}

#[test]
fn a_failed_parse_keeps_no_plan() {
    let handle = begin_single_device("zero");
    let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
    let key = [5, 6];
    assert!(start(handle, a, b, sem, 77, &key).is_err());
    let handle = begin_single_device("zero");
    let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
    start(handle, a, b, sem, VMEM, &key).unwrap();
    assert_eq!(read(handle, b), read(handle, a));
    end(handle).unwrap();
}
