//! Timing of the load hot path (ignored by default; run with
//! `cargo test --release -p mosaic_rt_core --test memory_timing -- --ignored --nocapture`).

mod memory_support;

use mosaic_rt_core::BufferSpec;
use std::hint::black_box;
use std::time::Instant;

use memory_support::*;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{DType, DimSel, FillMode, Init, MemorySpace, OobReads, Region};

fn per_iter(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_secs_f64() * 1e9 / iters as f64
}

#[test]
#[ignore]
fn timing_load_vs_memcpy() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
    let mib = 1 << 20;
    let init = vec![3u8; mib];
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &[256, 1024]) },
        )
        .unwrap();
    let mut out = vec![0u8; mib];
    let load = per_iter(2000, || {
        mem.load(MemRef::new(0, 0, MemorySpace::Hbm, id, &Region::full()), &mut out).unwrap();
        black_box(&out);
    });
    let src = vec![5u8; mib];
    let memcpy = per_iter(2000, || {
        out.copy_from_slice(black_box(&src));
        black_box(&out);
    });
    println!("1 MiB contiguous load: {:.1} us; copy_from_slice: {:.1} us", load / 1e3, memcpy / 1e3);

    // A (8, 128) f32 block of the (256, 1024) buffer: 8 runs of 512 bytes.
    let block = Region::new(vec![DimSel::slice(8, 8, 1), DimSel::slice(128, 128, 1)]);
    let mut small = vec![0u8; 8 * 128 * 4];
    let t = per_iter(200_000, || {
        mem.load(MemRef::new(0, 0, MemorySpace::Hbm, id, &block), &mut small).unwrap();
        black_box(&small);
    });
    println!("(8, 128) f32 block load: {t:.0} ns");
    let t = per_iter(200_000, || {
        mem.store(MemRef::new(0, 0, MemorySpace::Hbm, id, &block), &small).unwrap();
    });
    println!("(8, 128) f32 block store: {t:.0} ns");
    let one = Region::new(vec![DimSel::index(3), DimSel::index(7)]);
    let mut four = [0u8; 4];
    let t = per_iter(1_000_000, || {
        mem.load(MemRef::new(0, 0, MemorySpace::Hbm, id, &one), &mut four).unwrap();
        black_box(&four);
    });
    println!("scalar load: {t:.0} ns");
    assert!(load < memcpy * 3.0 + 20_000.0, "contiguous load should be one memcpy");
}
