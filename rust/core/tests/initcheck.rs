//! initcheck (`detect_uninitialized`): reads of kernel-local elements that
//! nothing wrote in this launch are `Uninitialized` errors naming the
//! never-written range; every way of writing (store, swap, DMA, copy,
//! initial value) counts, HBM is not checked, and with detection off
//! nothing changes. A random-program test checks exactness against a
//! per-element model.

mod common;
mod memory_support;

use memory_support::Rng;
use mosaic_rt_core::memory::MemRef;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{
    Config, DType, DimSel, DmaMode, DmaRequest, ErrorKind, Init, MemorySpace, Region, RtError, Runtime, SemKind,
};
use std::time::Duration;

const VMEM: MemorySpace = MemorySpace::Vmem;
const HBM: MemorySpace = MemorySpace::Hbm;

fn runtime_with(devices: u32, mode: DmaMode, detect: bool) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        dma_mode: mode,
        detect_uninitialized: detect,
        wait_timeout: Some(Duration::from_secs(10)),
        ..Config::default()
    })
    .unwrap()
}

fn runtime(mode: DmaMode) -> Runtime {
    runtime_with(2, mode, true)
}

fn rows(start: i64, n: i64) -> Region {
    Region::new(vec![DimSel::slice(start, n, 1)])
}

fn fresh(rt: &Runtime, device: u32, space: MemorySpace, shape: &[usize]) -> u32 {
    rt.allocate_buffer(device, Some(0), BufferSpec::new(space, DType::F32, shape)).unwrap()
}

fn load(rt: &Runtime, space: MemorySpace, id: u32, region: &Region, n: usize) -> Result<Vec<u8>, RtError> {
    let mut out = vec![0u8; 4 * n];
    rt.load(MemRef::new(0, 0, space, id, region), &mut out).map(|_| out)
}

fn uninit(e: RtError) -> String {
    assert_eq!(e.kind, ErrorKind::Uninitialized, "{e}");
    assert_eq!(e.kind.python_type(), "UninitializedReadError");
    assert_eq!((e.device, e.core), (Some(0), Some(0)));
    e.message
}

#[test]
fn fresh_memory_reads_fail_and_written_memory_reads_pass() {
    let rt = runtime(DmaMode::Eager);
    let v = fresh(&rt, 0, VMEM, &[16, 128]);
    let msg = uninit(load(&rt, VMEM, v, &rows(0, 8), 8 * 128).unwrap_err());
    assert_eq!(
        msg,
        "Uninitialized read of vmem buffer 100 of device 0, core 0 at [0:8, 0:128]: 1024 of the \
         1024 element(s) read ([0:8, 0:128]) were never written in this launch (no store, DMA, \
         block copy or initial value wrote them)"
    );
    // Write rows 0..4 only: a read of rows 2..6 names rows 4..6.
    rt.store(MemRef::new(0, 0, VMEM, v, &rows(0, 4)), &[0u8; 4 * 4 * 128]).unwrap();
    load(&rt, VMEM, v, &rows(0, 4), 4 * 128).unwrap();
    let msg = uninit(load(&rt, VMEM, v, &rows(2, 4), 4 * 128).unwrap_err());
    assert!(msg.contains("at [4:6, 0:128]: 256 of the 512 element(s) read ([2:6, 0:128])"), "{msg}");
    // Columns: a write of column block 64..128 of rows 4..6.
    let cols = Region::new(vec![DimSel::slice(4, 2, 1), DimSel::slice(64, 64, 1)]);
    rt.store(MemRef::new(0, 0, VMEM, v, &cols), &[0u8; 4 * 2 * 64]).unwrap();
    let msg = uninit(load(&rt, VMEM, v, &rows(2, 4), 4 * 128).unwrap_err());
    assert!(msg.contains("at [4:6, 0:64]: 128 of the 512"), "{msg}");
    // A single element: an integer index in the report.
    let one = Region::new(vec![DimSel::index(9), DimSel::index(5)]);
    let msg = uninit(load(&rt, VMEM, v, &one, 1).unwrap_err());
    assert!(msg.contains("at [9, 5]: 1 of the 1 element(s) read ([9, 5])"), "{msg}");
}

#[test]
fn initial_values_count_as_written_and_hbm_is_not_checked() {
    let rt = runtime(DmaMode::Eager);
    let init = rt
        .allocate_buffer(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&[1u8; 16]), ..BufferSpec::new(MemorySpace::Smem, DType::I32, &[4]) },
        )
        .unwrap();
    let mut out = [0u8; 16];
    rt.load(MemRef::new(0, 0, MemorySpace::Smem, init, &Region::full()), &mut out).unwrap();
    let hbm = fresh(&rt, 0, HBM, &[8]);
    load(&rt, HBM, hbm, &Region::full(), 8).unwrap();
    // Padding beyond the logical shape of an initialised buffer is not written.
    let padded = rt
        .allocate_buffer(
            0,
            Some(0),
            BufferSpec {
                logical_shape: Some(&[3, 8]),
                init: Init::Bytes(&[0u8; 4 * 24]),
                ..BufferSpec::new(VMEM, DType::F32, &[4, 8])
            },
        )
        .unwrap();
    load(&rt, VMEM, padded, &rows(0, 3), 24).unwrap();
    let msg = uninit(load(&rt, VMEM, padded, &rows(2, 2), 16).unwrap_err());
    assert!(msg.contains("at [3, 0:8]: 8 of the 16"), "{msg}");
}

#[test]
fn detection_off_changes_nothing() {
    let rt = runtime_with(1, DmaMode::Eager, false);
    let v = fresh(&rt, 0, VMEM, &[8]);
    let bytes = load(&rt, VMEM, v, &Region::full(), 8).unwrap();
    assert!(bytes.chunks(4).all(|c| f32::from_le_bytes(c.try_into().unwrap()).is_nan()));
}

#[test]
fn swaps_are_writes_of_what_their_mask_selects() {
    // Pallas lowers `ref[...] = x` to a swap whose old value is dropped:
    // a swap into fresh memory is not an uninitialized read.
    let rt = runtime(DmaMode::Eager);
    let v = fresh(&rt, 0, VMEM, &[8]);
    let data = [0u8; 32];
    let mut out = [0u8; 32];
    rt.swap(MemRef::new(0, 0, VMEM, v, &rows(0, 2)), &data[..8], None, &mut out[..8]).unwrap();
    load(&rt, VMEM, v, &rows(0, 2), 2).unwrap();
    // A masked swap writes only its selected elements.
    rt.swap(MemRef::new(0, 0, VMEM, v, &Region::full()), &data, Some(&[0, 0, 1, 0, 1, 0, 0, 0]), &mut out).unwrap();
    load(&rt, VMEM, v, &rows(0, 3), 3).unwrap();
    let msg = uninit(load(&rt, VMEM, v, &rows(0, 5), 5).unwrap_err());
    assert!(msg.contains("at [3]: 1 of the 5"), "{msg}");
}

#[test]
fn block_copies_mark_their_destination_and_check_their_source() {
    let rt = runtime(DmaMode::Eager);
    let hbm = rt
        .allocate_buffer(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&[0; 4 * 2048]), ..BufferSpec::new(HBM, DType::F32, &[16, 128]) },
        )
        .unwrap();
    let out = fresh(&rt, 0, HBM, &[16, 128]);
    let block = fresh(&rt, 0, VMEM, &[8, 128]);
    fn r(id: u32, space: MemorySpace, region: &Region) -> MemRef<'_> {
        MemRef { device: 0, core: 0, space, id, region }
    }
    let (top, bottom, upper, lower) = (rows(0, 8), rows(8, 8), rows(0, 4), rows(4, 4));
    // Copy-out of a block the kernel never wrote.
    let e = rt.copy(r(block, VMEM, &Region::full()), r(out, HBM, &bottom)).unwrap_err();
    assert!(uninit(e).contains("at [0:8, 0:128]: 1024 of the 1024"));
    // Copy-in fills it; then copy-out works.
    rt.copy(r(hbm, HBM, &top), r(block, VMEM, &Region::full())).unwrap();
    rt.copy(r(block, VMEM, &Region::full()), r(out, HBM, &bottom)).unwrap();
    // Copies within one buffer go through a temporary: still checked.
    let e = rt.copy(r(block, VMEM, &upper), r(block, VMEM, &lower)).map(|_| ());
    e.unwrap();
    let scratch = fresh(&rt, 0, VMEM, &[8, 128]);
    let e = rt.copy(r(scratch, VMEM, &upper), r(scratch, VMEM, &lower)).unwrap_err();
    assert!(uninit(e).contains("at [0:4, 0:128]"));
}

fn dma(src: (MemorySpace, u32, Region), dst: (MemorySpace, u32, Region), sem: u32) -> DmaRequest {
    DmaRequest {
        src_space: src.0,
        src_region: src.2,
        dst_space: dst.0,
        dst_region: dst.2,
        ..common::dma(src.1, dst.1, sem)
    }
}

#[test]
fn dmas_write_and_read_in_both_modes() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let sem = rt.allocate_semaphores(0, Some(0), SemKind::Dma, 1).unwrap();
        let hbm = rt
            .allocate_buffer(
                0,
                Some(0),
                BufferSpec { init: Init::Bytes(&[0; 32]), ..BufferSpec::new(HBM, DType::F32, &[8]) },
            )
            .unwrap();
        let a = fresh(&rt, 0, VMEM, &[8]);
        let b = fresh(&rt, 0, VMEM, &[8]);
        // HBM -> a[0:4]: a DMA write.
        rt.dma_start(dma((HBM, hbm, rows(0, 4)), (VMEM, a, rows(0, 4)), sem)).unwrap();
        rt.dma_wait(0, 0, sem, 16).unwrap();
        load(&rt, VMEM, a, &rows(0, 4), 4).unwrap();
        // a[2:6] -> b: a DMA read of two never-written elements; eager
        // fails at the start, on_wait at the wait that runs it.
        let req = dma((VMEM, a, rows(2, 4)), (VMEM, b, rows(0, 4)), sem);
        let e = match mode {
            DmaMode::Eager | DmaMode::Tpu => rt.dma_start(req.clone()).unwrap_err(),
            DmaMode::OnWait => {
                rt.dma_start(req.clone()).unwrap();
                rt.dma_wait(0, 0, sem, 16).unwrap_err()
            }
        };
        assert!(uninit(e).contains("vmem buffer 101 of device 0, core 0 at [4:6]: 2 of the 4"), "{mode:?}");
    }
}

#[test]
fn remote_dmas_mark_the_other_devices_memory() {
    let rt = runtime(DmaMode::OnWait);
    let send = rt.allocate_semaphores(0, Some(0), SemKind::Dma, 1).unwrap();
    let recv = rt.allocate_semaphores(1, Some(0), SemKind::Dma, 1).unwrap();
    let src = rt
        .allocate_buffer(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&[0; 32]), ..BufferSpec::new(VMEM, DType::F32, &[8]) },
        )
        .unwrap();
    let dst = fresh(&rt, 1, VMEM, &[8]);
    let mut req = dma((VMEM, src, Region::full()), (VMEM, dst, Region::full()), recv);
    req.src_sem = Some(send);
    req.dst_device = Some(1);
    rt.dma_start(req.clone()).unwrap();
    rt.dma_wait(1, 0, recv, 32).unwrap();
    rt.dma_wait(0, 0, send, 32).unwrap();
    let mut out = [0u8; 32];
    rt.load(MemRef::new(1, 0, VMEM, dst, &Region::full()), &mut out).unwrap();
}

#[test]
fn out_of_bounds_reads_check_only_their_in_bounds_part() {
    let rt = Runtime::new(Config {
        oob_reads: mosaic_rt_core::OobReads::Uninitialized,
        detect_uninitialized: true,
        ..Config::default()
    })
    .unwrap();
    let v = fresh(&rt, 0, VMEM, &[8]);
    rt.store(MemRef::new(0, 0, VMEM, v, &rows(4, 4)), &[0; 16]).unwrap();
    load(&rt, VMEM, v, &rows(4, 8), 8).unwrap();
    assert!(uninit(load(&rt, VMEM, v, &rows(2, 8), 8).unwrap_err()).contains("at [2:4]: 2 of the 6"));
}

/// Random strided stores, masked swaps and copies on a 3-d buffer, each
/// followed by random loads, against a per-element model of what was written.
#[test]
fn random_programs_match_a_per_element_model() {
    const SHAPE: [usize; 3] = [3, 5, 70];
    let n: usize = SHAPE.iter().product();
    let mut rng = Rng::new(7);
    for _ in 0..40 {
        let rt = runtime_with(1, DmaMode::Eager, true);
        let v = fresh(&rt, 0, VMEM, &SHAPE);
        let mut written = vec![false; n];
        for _ in 0..30 {
            let (region, elems) = random_region(&mut rng, &SHAPE);
            let count = elems.len();
            match rng.range(0, 2) {
                0 => {
                    rt.store(MemRef::new(0, 0, VMEM, v, &region), &vec![0u8; 4 * count]).unwrap();
                    elems.iter().for_each(|&e| written[e] = true);
                }
                1 => {
                    let mask: Vec<u8> = (0..count).map(|_| rng.chance(50) as u8).collect();
                    let mut out = vec![0u8; 4 * count];
                    rt.swap(MemRef::new(0, 0, VMEM, v, &region), &vec![0u8; 4 * count], Some(&mask), &mut out).unwrap();
                    elems.iter().zip(&mask).filter(|(_, &m)| m != 0).for_each(|(&e, _)| written[e] = true);
                }
                _ => {
                    let r = load(&rt, VMEM, v, &region, count);
                    let missing: Vec<usize> = elems.iter().copied().filter(|&e| !written[e]).collect();
                    assert_eq!(r.is_ok(), missing.is_empty(), "load of {region:?}: {r:?}");
                    if let Err(e) = r {
                        let msg = uninit(e);
                        assert!(msg.contains(&format!(": {} of the {count} element(s)", missing.len())), "{msg}");
                    }
                }
            }
        }
    }
}

/// A random region of a buffer of `shape` (slices with strides, indices)
/// and the flat indices of its elements in C order.
fn random_region(rng: &mut Rng, shape: &[usize]) -> (Region, Vec<usize>) {
    let listed = rng.range(0, shape.len() as i64) as usize;
    let mut dims = Vec::new();
    let mut per_dim: Vec<Vec<usize>> = Vec::new();
    for (k, &len) in shape.iter().enumerate() {
        if k >= listed {
            per_dim.push((0..len).collect());
            continue;
        }
        if rng.chance(25) {
            let i = rng.range(0, len as i64 - 1);
            dims.push(DimSel::index(i));
            per_dim.push(vec![i as usize]);
        } else {
            let start = rng.range(0, len as i64 - 1);
            let stride = rng.range(1, 3);
            let size = rng.range(1, (len as i64 - start - 1) / stride + 1);
            dims.push(DimSel::slice(start, size, stride));
            per_dim.push((0..size).map(|i| (start + i * stride) as usize).collect());
        }
    }
    let mut flat = vec![0usize];
    for (k, idxs) in per_dim.iter().enumerate() {
        flat = flat.iter().flat_map(|&f| idxs.iter().map(move |&i| f * shape[k] + i)).collect();
    }
    (Region::new(dims), flat)
}

#[test]
fn reports_name_the_site_of_the_read() {
    fn resolve(site: u32) -> Option<String> {
        (site == 41).then(|| "kernel.py:12:4 (body)".to_string())
    }
    mosaic_rt_core::site::set_resolver(resolve);
    let rt = runtime(DmaMode::Eager);
    let v = fresh(&rt, 0, VMEM, &[8]);
    let _site = mosaic_rt_core::site::enter(41);
    let msg = uninit(load(&rt, VMEM, v, &Region::full(), 8).unwrap_err());
    assert!(msg.ends_with("wrote them); read at kernel.py:12:4 (body)"), "{msg}");
}
