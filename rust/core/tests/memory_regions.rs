//! Property-style checks of load/store on random strided N-d regions
//! (squeezed dims, padding, out-of-bounds) against a naive reference.

mod memory_support;

use memory_support::*;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{DType, DimSel, ErrorKind, FillMode, Init, MemorySpace, OobReads, Region};

fn random_case(rng: &mut Rng) -> (Vec<usize>, Vec<usize>, Region) {
    let rank = rng.range(0, 4) as usize;
    let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 6) as usize).collect();
    let logical: Vec<usize> =
        shape.iter().map(|&n| if rng.chance(30) { rng.range(1, n as i64) as usize } else { n }).collect();
    let listed = rng.range(0, rank as i64) as usize;
    let dims = (0..listed)
        .map(|k| {
            let n = shape[k] as i64;
            // Mostly in bounds, sometimes past the end.
            let hi = if rng.chance(15) { n + 2 } else { n - 1 };
            let start = rng.range(0, hi);
            if rng.chance(25) {
                DimSel::index(start)
            } else {
                let stride = rng.range(1, 3);
                let max_size = if rng.chance(15) { n + 1 } else { ((n - start).max(0) + stride - 1) / stride };
                DimSel::slice(start, rng.range(0, max_size.max(0)), stride)
            }
        })
        .collect();
    (shape, logical, Region::new(dims))
}

fn check_random_loads(oob: OobReads, fill: FillMode, seed: u64) {
    let mut rng = Rng::new(seed);
    let mem = table(1, 1, oob, fill);
    let (mut in_bounds, mut out_of_bounds) = (0, 0);
    for case in 0..3000 {
        let dtype = DType::ALL[rng.range(0, 12) as usize];
        let size = dtype.itemsize();
        let (shape, logical, region) = random_case(&mut rng);
        let init = rng.bytes(numel(&logical) * size);
        let id = mem
            .allocate(
                0,
                Some(0),
                BufferSpec {
                    logical_shape: Some(&logical),
                    init: Init::Bytes(&init),
                    ..BufferSpec::new(MemorySpace::Vmem, dtype, &shape)
                },
            )
            .unwrap();
        let key = mosaic_rt_core::BufferKey { space: MemorySpace::Vmem, id, device: 0, core: 0 };
        let content = mem.content(key).unwrap();
        let full = full_shape(&region, &logical);
        assert_eq!(mem.region_shape(key, &region).unwrap(), full);
        let mut out = vec![0u8; numel(&full) * size];
        let got = mem.load(MemRef::new(0, 0, MemorySpace::Vmem, id, &region), &mut out);
        let want =
            ref_load(&content, &shape, &logical, size, &region, &fill.bytes_of(dtype), oob == OobReads::Uninitialized);
        match want {
            Some(w) => {
                in_bounds += 1;
                got.unwrap_or_else(|e| panic!("case {case}: {e} {shape:?} {logical:?} {region:?}"));
                assert_eq!(out, w, "case {case}: {dtype:?} {shape:?} {logical:?} {region:?}");
            }
            None => {
                out_of_bounds += 1;
                let e = got.expect_err(&format!("case {case}: {shape:?} {region:?} should raise"));
                assert_eq!(e.kind, ErrorKind::Index);
            }
        }
        mem.free(0, 0, MemorySpace::Vmem, id).unwrap();
    }
    // Both outcomes must be well represented for the comparison to mean much.
    assert!(in_bounds > 500, "{in_bounds}");
    if oob == OobReads::Raise {
        assert!(out_of_bounds > 300, "{out_of_bounds}");
    }
}

#[test]
fn random_loads_raise() {
    check_random_loads(OobReads::Raise, FillMode::Nan, 1);
}

#[test]
fn random_loads_uninitialized_nan() {
    check_random_loads(OobReads::Uninitialized, FillMode::Nan, 2);
}

#[test]
fn random_loads_uninitialized_zero() {
    check_random_loads(OobReads::Uninitialized, FillMode::Zero, 3);
}

#[test]
fn random_stores() {
    let mut rng = Rng::new(4);
    let mem = table(1, 2, OobReads::Raise, FillMode::Nan);
    let (mut written, mut rejected) = (0, 0);
    for case in 0..3000 {
        let dtype = DType::ALL[rng.range(0, 12) as usize];
        let size = dtype.itemsize();
        let (shape, logical, region) = random_case(&mut rng);
        let init = rng.bytes(numel(&logical) * size);
        let space = if rng.chance(50) { MemorySpace::Hbm } else { MemorySpace::Smem };
        let id = mem
            .allocate(
                0,
                None,
                BufferSpec {
                    logical_shape: Some(&logical),
                    init: Init::Bytes(&init),
                    ..BufferSpec::new(space, dtype, &shape)
                },
            )
            .unwrap();
        let key = mosaic_rt_core::BufferKey::for_access(space, id, 0, 1);
        let mut expected = mem.content(key).unwrap();
        let full = full_shape(&region, &logical);
        let data = rng.bytes(numel(&full) * size);
        let got = mem.store(MemRef::new(0, 1, space, id, &region), &data);
        match ref_store(&mut expected, &shape, &logical, size, &region, &data) {
            Ok(()) => {
                written += 1;
                got.unwrap_or_else(|e| panic!("case {case}: {e}"))
            }
            Err(()) => {
                rejected += 1;
                assert_eq!(got.unwrap_err().kind, ErrorKind::OutOfBoundsWrite, "case {case}")
            }
        }
        assert_eq!(mem.content(key).unwrap(), expected, "case {case}: {shape:?} {logical:?} {region:?}");
        for core in 0..2 {
            mem.free(0, core, space, id).unwrap();
        }
    }
    assert!(written > 500 && rejected > 150, "{written} {rejected}");
}

/// Random in-bounds buffer-to-buffer copies agree with load-then-store.
#[test]
fn random_copies_match_load_then_store() {
    let mut rng = Rng::new(5);
    let mem = table(2, 1, OobReads::Uninitialized, FillMode::Zero);
    for case in 0..1500 {
        let dtype = DType::ALL[rng.range(0, 12) as usize];
        let size = dtype.itemsize();
        let (shape, logical, region) = random_case(&mut rng);
        let init = rng.bytes(numel(&logical) * size);
        let src = mem
            .allocate(
                0,
                Some(0),
                BufferSpec {
                    logical_shape: Some(&logical),
                    init: Init::Bytes(&init),
                    ..BufferSpec::new(MemorySpace::Hbm, dtype, &shape)
                },
            )
            .unwrap();
        // Destination: same shape with the region's full shape, on the other device.
        let full = full_shape(&region, &logical);
        let dst = mem.allocate(1, Some(0), BufferSpec::new(MemorySpace::Vmem, dtype, &full)).unwrap();
        let mut via_load = vec![0u8; numel(&full) * size];
        let loaded = mem.load(MemRef::new(0, 0, MemorySpace::Hbm, src, &region), &mut via_load);
        let s =
            mosaic_rt_core::memory::MemRef { device: 0, core: 0, space: MemorySpace::Hbm, id: src, region: &region };
        let whole = Region::full();
        let d =
            mosaic_rt_core::memory::MemRef { device: 1, core: 0, space: MemorySpace::Vmem, id: dst, region: &whole };
        let copied = mem.copy(s, d);
        match (loaded, copied) {
            (Ok(()), Ok(bytes)) => {
                assert_eq!(bytes, via_load.len());
                let key = mosaic_rt_core::BufferKey { space: MemorySpace::Vmem, id: dst, device: 1, core: 0 };
                if numel(&full) > 0 {
                    assert_eq!(mem.content(key).unwrap(), via_load, "case {case}");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("case {case}: load {a:?} but copy {b:?}"),
        }
        mem.free(0, 0, MemorySpace::Hbm, src).unwrap();
        mem.free(1, 0, MemorySpace::Vmem, dst).unwrap();
    }
}
