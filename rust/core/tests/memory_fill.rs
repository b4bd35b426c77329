//! A fill (`Stored::Splat`: one element swapped into a region) must do
//! exactly what a swap of the element repeated over the region does: same
//! bytes (padding and logical shapes, strided and squeezed regions), same
//! previous values, same errors; also when the previous values are not
//! asked for, and under a mask.

mod memory_support;

use memory_support::Rng;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{Config, DType, DimSel, FillMode, Init, MemRef, MemorySpace, Region, Runtime, Stored};

const VMEM: MemorySpace = MemorySpace::Vmem;

fn runtime() -> Runtime {
    Runtime::new(Config { num_devices: 1, cores_per_device: 1, fill: FillMode::Nan, ..Config::default() }).unwrap()
}

/// A random region of a buffer of `shape`: per dim an index or a strided
/// slice, sometimes reaching past the end (an out-of-bounds access).
fn region(rng: &mut Rng, shape: &[usize]) -> (Region, Vec<usize>) {
    let mut dims = Vec::new();
    let mut full = Vec::new();
    for &n in shape {
        let n = n as i64;
        if rng.chance(20) {
            dims.push(DimSel::index(rng.range(0, n - 1)));
            continue;
        }
        let stride = rng.range(1, 2);
        let start = rng.range(0, n - 1);
        let past_end = i64::from(rng.chance(10));
        let size = rng.range(0, (n - start + stride - 1) / stride + past_end);
        dims.push(DimSel::slice(start, size, stride));
        full.push(size as usize);
    }
    (Region::new(dims), full)
}

/// Everything a buffer holds, as bytes (or the error reading it gave).
fn contents(rt: &Runtime, id: u32, shape: &[usize], itemsize: usize) -> Vec<u8> {
    let mut out = vec![0u8; shape.iter().product::<usize>() * itemsize];
    rt.load(MemRef::new(0, 0, VMEM, id, &Region::full()), &mut out).unwrap();
    out
}

#[test]
fn a_fill_writes_what_a_swap_of_the_repeated_element_writes() {
    let mut rng = Rng::new(7);
    let (mut written, mut refused) = (0, 0);
    for case in 0..300 {
        let (dtype, itemsize) = [(DType::F32, 4), (DType::BF16, 2), (DType::I8, 1), (DType::Bool, 1)][case % 4];
        let logical: Vec<usize> = (0..rng.range(1, 3)).map(|_| rng.range(1, 6) as usize).collect();
        let mut shape = logical.clone();
        if rng.chance(30) {
            *shape.last_mut().unwrap() += 2; // padded
        }
        let element = rng.bytes(itemsize);
        let (region, full) = region(&mut rng, &shape);
        let dense: Vec<u8> = element.iter().copied().cycle().take(full.iter().product::<usize>() * itemsize).collect();
        let want_old = rng.chance(50);
        let (a, b) = (runtime(), runtime());
        let init = rng.bytes(logical.iter().product::<usize>() * itemsize);
        let alloc = |rt: &Runtime| {
            rt.allocate_buffer(
                0,
                Some(0),
                BufferSpec {
                    logical_shape: Some(&logical),
                    init: Init::Bytes(&init),
                    ..BufferSpec::new(VMEM, dtype, &shape)
                },
            )
            .unwrap()
        };
        let (ia, ib) = (alloc(&a), alloc(&b));
        let (ra, rb) = (MemRef::new(0, 0, VMEM, ia, &region), MemRef::new(0, 0, VMEM, ib, &region));
        let (mut old_a, mut old_b) = (vec![0u8; dense.len()], vec![0u8; dense.len()]);
        let mask: Option<Vec<u8>> =
            rng.chance(30).then(|| (0..dense.len() / itemsize).map(|_| rng.chance(50) as u8).collect());
        let got_a = a.swap_value(ra, Stored::Splat(&element), mask.as_deref(), want_old.then_some(&mut old_a[..]));
        let got_b = b.swap(rb, &dense, mask.as_deref(), &mut old_b);
        if !want_old {
            old_b.fill(0); // not asked for: `old_a` stays as it was
        }
        let what =
            format!("case {case}: {dtype:?} {shape:?} (logical {logical:?}) {region:?} old={want_old} mask={mask:?}");
        if got_b.is_ok() {
            written += 1
        } else {
            refused += 1
        }
        assert_eq!(got_a.map_err(|e| e.to_string()), got_b.map_err(|e| e.to_string()), "{what}");
        assert_eq!(old_a, old_b, "{what}");
        assert_eq!(contents(&a, ia, &logical, itemsize), contents(&b, ib, &logical, itemsize), "{what}");
    }
    // Both outcomes were compared (the regions reach past the end sometimes).
    assert!(written > 100 && refused > 10, "{written} written, {refused} refused");
}

#[test]
fn a_fill_value_of_the_wrong_size_is_an_error_naming_it() {
    let rt = runtime();
    let id = rt.allocate_buffer(0, Some(0), BufferSpec::new(VMEM, DType::F32, &[2, 4])).unwrap();
    let e =
        rt.swap_value(MemRef::new(0, 0, VMEM, id, &Region::full()), Stored::Splat(&[1, 2]), None, None).unwrap_err();
    assert!(e.to_string().contains("data"), "{e}");
}
