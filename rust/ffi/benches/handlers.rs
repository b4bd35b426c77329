//! Cost of the FFI layer itself: handlers called with prepared fake frames
//! (no XLA) vs the same runtime calls made directly. Prints a table.
//! Run: cargo bench -p mosaic_rt_ffi

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DimSel, MemorySpace, Region, Runtime, SemKind};
use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::FakeCall;
use std::hint::black_box;
use std::time::Instant;

const N: u32 = 2_000_000;

fn per_op(label: &str, ops_per_iter: u32, mut f: impl FnMut()) {
    for _ in 0..N / 10 {
        f();
    }
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..N {
            f();
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / (N * ops_per_iter) as f64);
    }
    println!("| {label:38} | {best:8.1} ns |");
}

fn main() {
    let mut begin = FakeCall::new()
        .arg_i32(0)
        .arg_i32(0)
        .ret_i32()
        .ret(abi::DT_U32, &[2], 8)
        .attr_i64("uid", 1)
        .attr_i64("num_devices", 1)
        .attr_i64("num_cores", 1)
        .attr_str("dma_execution_mode", "on_wait")
        .attr_str("out_of_bounds_reads", "raise")
        .attr_str("uninitialized_memory", "nan")
        .attr_i64("wait_timeout_ms", 10_000);
    begin.call(h::kernel_begin).unwrap();
    let b = begin.ret_bytes(1);
    let handle = [u32::from_le_bytes(b[0..4].try_into().unwrap()), u32::from_le_bytes(b[4..8].try_into().unwrap())];
    let core = || FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).arg_i32(0);
    let mut alloc = core().ret_i32().ret_i32().attr_str("kind", "regular").attr_i64("count", 1);
    alloc.call(h::allocate_semaphores).unwrap();
    let sem = alloc.ret_i32_value(1);

    let mut sig = core().arg_i32(sem).arg_i32(1).arg_i32(-1).arg_i32(-1).ret_i32();
    let mut wait = core().arg_i32(sem).arg_i32(1).ret_i32();
    let mut read = core().arg_i32(sem).ret_i32().ret_i32();
    let mut info = FakeCall::new().arg_i32(0).ret_i32().ret(abi::DT_S32, &[3], 12);
    let (mut sig, mut wait, mut read, mut info) = (sig.prepare(), wait.prepare(), read.prepare(), info.prepare());

    let mut alloc_buf =
        core().ret_i32().ret_i32().attr_i64("space", 0).attr_str("dtype", "float32").attr_i64s("shape", &[8, 128]);
    alloc_buf.call(h::allocate_buffer).unwrap();
    let buf = alloc_buf.ret_i32_value(1);
    // One (128,) row of an (8, 128) f32 buffer, chosen by a dynamic start.
    let row = |c: FakeCall| {
        c.attr_i64("space", 0).attr_i64s("sizes", &[1]).attr_i64s("strides", &[1]).attr_i64s("squeezed", &[1])
    };
    let mut load = row(core().arg_i32(buf).arg_i32s(&[3]).ret_i32().ret(abi::DT_F32, &[128], 512));
    let mut store = row(core().arg_i32(buf).arg_i32s(&[3]).arg(abi::DT_F32, &[128], vec![0; 512]).ret_i32());
    let (mut load, mut store) = (load.prepare(), store.prepare());

    let rt = Runtime::new(Config::default()).unwrap();
    let s = rt.allocate_semaphores(0, Some(0), SemKind::Regular, 1).unwrap();

    println!("| {:38} | {:>11} |", "operation", "time/op");
    println!("|{}|{}|", "-".repeat(40), "-".repeat(13));
    per_op("handler: launch_info (no runtime)", 1, || {
        black_box(info.call(h::launch_info)).unwrap();
    });
    per_op("handler: semaphore_read", 1, || {
        black_box(read.call(h::semaphore_read)).unwrap();
    });
    per_op("handler: signal + wait, per op", 2, || {
        sig.call(h::semaphore_signal).unwrap();
        wait.call(h::semaphore_wait).unwrap();
    });
    per_op("handler: load f32[128] row", 1, || {
        black_box(load.call(h::load)).unwrap();
    });
    per_op("handler: store f32[128] row", 1, || {
        black_box(store.call(h::store)).unwrap();
    });
    let b = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::F32, &[8, 128])).unwrap();
    let mut out = vec![0u8; 512];
    per_op("direct Runtime: load f32[128] row", 1, || {
        let region = Region::new(vec![DimSel::index(3)]);
        rt.load(MemRef::new(0, 0, MemorySpace::Vmem, b, &region), &mut out).unwrap();
    });
    per_op("direct Runtime: signal + wait, per op", 2, || {
        rt.semaphore_signal(0, 0, s, 1, None, None).unwrap();
        rt.semaphore_wait(0, 0, s, 1).unwrap();
    });
}
