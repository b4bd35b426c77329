//! Trailing waits: a `dma_start` or `dma_wait` carrying the waits that
//! follow it in the kernel runs them after itself, as separate `dma_wait`s
//! would (same semaphore effects, same checks).

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

/// A local DMA src -> dst signalling `sem`, with `waits` trailing waits
/// (semaphore, bytes).
fn start(handle: [u32; 2], src: i32, dst: i32, sem: i32, waits: &[(i32, i64)]) -> Result<(), String> {
    let mut c =
        core_call(handle).arg_i32(src).arg_i32s(&[]).arg_i32(dst).arg_i32s(&[]).arg_i32(sem).arg_i32(-1).arg_i32(-1);
    for &(s, _) in waits {
        c = c.arg_i32(s);
    }
    c = c.ret_i32().attr_i64("src_space", VMEM).attr_i64("dst_space", VMEM);
    if !waits.is_empty() {
        let bytes: Vec<i64> = waits.iter().map(|w| w.1).collect();
        c = c.attr_i64s("then_wait_bytes", &bytes).attr_i64s("then_wait_sites", &vec![0; waits.len()]);
    }
    whole_region(whole_region(c, "src_"), "dst_").call(h::dma_start)
}

fn end(handle: [u32; 2]) {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end).unwrap();
}

#[test]
fn a_start_with_its_wait_is_one_call() {
    let handle = begin_single_device("zero");
    let (src, dst, sem) = (alloc(handle, 1.0), alloc(handle, 100.0), dma_sem(handle));
    start(handle, src, dst, sem, &[(sem, BYTES)]).unwrap();
    // The wait consumed the DMA's bytes: nothing is left on the semaphore.
    assert_eq!(sem_value(handle, sem), 0);
    end(handle);
}

#[test]
fn a_wait_runs_its_trailing_waits_in_order() {
    let handle = begin_single_device("zero");
    let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
    for _ in 0..3 {
        start(handle, a, b, sem, &[]).unwrap();
    }
    assert_eq!(sem_value(handle, sem), 3 * BYTES as i32);
    let mut c = core_call(handle)
        .arg_i32(sem)
        .arg_i32(sem)
        .arg_i32(sem)
        .ret_i32()
        .attr_i64("bytes", BYTES)
        .attr_i64s("then_wait_bytes", &[BYTES, BYTES])
        .attr_i64s("then_wait_sites", &[0, 0]);
    c.call(h::dma_wait).unwrap();
    assert_eq!(sem_value(handle, sem), 0);
    end(handle);
}

#[test]
fn malformed_trailing_waits_are_named() {
    let handle = begin_single_device("zero");
    let (a, b, sem) = (alloc(handle, 1.0), alloc(handle, 2.0), dma_sem(handle));
    start(handle, a, b, sem, &[]).unwrap();
    let mut c = core_call(handle)
        .arg_i32(sem)
        .arg_i32(sem)
        .ret_i32()
        .attr_i64("bytes", BYTES)
        .attr_i64s("then_wait_bytes", &[-4])
        .attr_i64s("then_wait_sites", &[0]);
    let err = c.call(h::dma_wait).unwrap_err();
    assert!(err.contains("bytes must be >= 0, got -4"), "{err}");

    let handle = begin_single_device("zero");
    let sem = dma_sem(handle);
    let mut c = core_call(handle)
        .arg_i32(sem)
        .arg_i32(sem)
        .ret_i32()
        .attr_i64("bytes", 0)
        .attr_i64s("then_wait_bytes", &[4])
        .attr_i64s("then_wait_sites", &[0, 0]);
    let err = c.call(h::dma_wait).unwrap_err();
    assert!(err.contains("1 trailing wait sizes but 2 sites"), "{err}");
    // The call was bound to its launch first: the launch failed with it.
    let end = FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).ret_i32().call(h::kernel_end);
    assert!(end.unwrap_err().contains("1 trailing wait sizes but 2 sites"));
}
