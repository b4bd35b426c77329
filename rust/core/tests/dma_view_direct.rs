//! Eager DMAs through stream views (the u32 view of bf16 / int8 rows) move
//! their bytes between the two buffers directly (`view_direct.rs`); on_wait
//! DMAs stage them through the general path (`DmaView::load`, `store`).
//! Both must leave the same bytes and fail with the same messages, in the
//! plain case and in every case the direct path declines.

mod common;

use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DimSel, DmaMode, DmaRequest, DmaView, Init, MemorySpace, Region, RtError,
    Runtime, SemKind, ViewMap,
};
use std::time::Duration;

const HBM: MemorySpace = MemorySpace::Hbm;
const VMEM: MemorySpace = MemorySpace::Vmem;

fn runtime(mode: DmaMode, detect_uninitialized: bool) -> Runtime {
    let config = Config {
        dma_mode: mode,
        detect_uninitialized,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    Runtime::new(config).unwrap()
}

/// A u8 buffer of `shape` holding a byte pattern that differs per buffer.
fn pattern(rt: &Runtime, space: MemorySpace, shape: &[usize], salt: u8) -> u32 {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(salt)).collect();
    let spec = BufferSpec { init: Init::Bytes(&bytes), ..BufferSpec::new(space, DType::U8, shape) };
    rt.allocate_buffer(0, Some(0), spec).unwrap()
}

fn bytes(rt: &Runtime, space: MemorySpace, id: u32) -> Vec<u8> {
    rt.buffer_bytes(BufferKey { space, id, device: 0, core: 0 }).unwrap()
}

fn dims(d: &[(i64, i64, i64)]) -> Region {
    Region::new(d.iter().map(|&(start, size, stride)| DimSel { start, size, stride, squeezed: false }).collect())
}

/// The map of a u32 view of `k` rows of `width` bytes each: k = 2 is bf16
/// rows (2 bytes of each row in turn per word), k = 4 is int8 rows (1 byte
/// each), k = 1 is the row itself.
fn packed_rows(k: usize, width: usize) -> Vec<u32> {
    let run = 4 / k;
    (0..k * width)
        .map(|n| {
            let (word, byte) = (n / 4, n % 4);
            ((byte / run) * width + word * run + byte % run) as u32
        })
        .collect()
}

struct Side {
    space: MemorySpace,
    shape: Vec<usize>,
    region: Region,
}

/// Runs one DMA from `src` to `dst` through `view` (on `dst` when
/// `scatter`) and returns both buffers' bytes afterwards, or the error.
fn run(
    mode: DmaMode,
    detect: bool,
    src: &Side,
    dst: &Side,
    map: &[u32],
    scatter: bool,
) -> Result<[Vec<u8>; 2], String> {
    let rt = runtime(mode, detect);
    let s = pattern(&rt, src.space, &src.shape, 3);
    // One buffer on both sides when both name the same space and shape.
    let same = src.space == dst.space && src.shape == dst.shape && src.space == HBM;
    let d = if same { s } else { pattern(&rt, dst.space, &dst.shape, 101) };
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let req = DmaRequest {
        src_space: src.space,
        src_region: src.region.clone(),
        dst_space: dst.space,
        dst_region: dst.region.clone(),
        ..common::dma(s, d, sem)
    };
    let m = Some(ViewMap::bytes(map));
    let view = if scatter { DmaView { src: None, dst: m } } else { DmaView { src: m, dst: None } };
    let err = |e: RtError| e.message;
    rt.dma_start_view(req, view).map_err(err)?;
    rt.dma_wait(0, 0, sem, map.len() as i64).map_err(err)?;
    Ok([bytes(&rt, src.space, s), bytes(&rt, dst.space, d)])
}

fn same_in_both_modes(
    src: &Side,
    dst: &Side,
    map: &[u32],
    scatter: bool,
    detect: bool,
) -> Result<[Vec<u8>; 2], String> {
    let eager = run(DmaMode::Eager, detect, src, dst, map, scatter);
    let on_wait = run(DmaMode::OnWait, detect, src, dst, map, scatter);
    assert_eq!(eager, on_wait, "scatter {scatter}, map of {} bytes", map.len());
    eager
}

#[test]
fn stream_views_leave_the_same_bytes_as_the_staged_path() {
    // Regions of k rows x width bytes inside a 12 x 40 byte HBM array: at
    // the corner, in the middle, every other row, and a plain slice of a
    // 3-D array; the other side a whole VMEM buffer or one row of one.
    let mut moved = 0;
    for k in [1, 2, 4] {
        for width in [8, 16] {
            let map = packed_rows(k, width);
            let n = (k * width) as i64;
            let regions = [
                dims(&[(0, k as i64, 1), (0, width as i64, 1)]),
                dims(&[(5, k as i64, 1), (12, width as i64, 1)]),
                dims(&[(1, k as i64, 2), (24, width as i64, 1)]),
            ];
            let plains = [
                Side { space: VMEM, shape: vec![k * width], region: Region::full() },
                Side { space: VMEM, shape: vec![3, k * width + 8], region: dims(&[(1, 1, 1), (4, n, 1)]) },
            ];
            for region in regions {
                let mapped = Side { space: HBM, shape: vec![12, 40], region };
                for plain in &plains {
                    let plain_as_dst =
                        Side { space: plain.space, shape: plain.shape.clone(), region: plain.region.clone() };
                    let [src, dst] = same_in_both_modes(&mapped, &plain_as_dst, &map, false, false).unwrap();
                    assert_ne!(src, dst);
                    same_in_both_modes(plain, &mapped, &map, true, false).unwrap();
                    moved += 2;
                }
            }
        }
    }
    assert_eq!(moved, 3 * 2 * 3 * 2 * 2);
}

#[test]
fn what_the_direct_path_declines_still_moves_or_fails_as_before() {
    let map = packed_rows(2, 8);
    let plain = Side { space: VMEM, shape: vec![16], region: Region::full() };
    // Columns taken every other byte (not contiguous), rows past the end
    // of the array (out of bounds), a map that misses bytes of its region
    // (a scatter writes just the bytes it covers), one buffer on both sides.
    let strided = Side { space: HBM, shape: vec![12, 40], region: dims(&[(0, 2, 1), (0, 8, 2)]) };
    same_in_both_modes(&strided, &plain, &map, false, false).unwrap();
    same_in_both_modes(&plain, &strided, &map, true, false).unwrap();
    let outside = Side { space: HBM, shape: vec![12, 40], region: dims(&[(11, 2, 1), (0, 8, 1)]) };
    let e = same_in_both_modes(&outside, &plain, &map, false, false).unwrap_err();
    assert!(e.starts_with("Out-of-bounds"), "{e}");
    let e = same_in_both_modes(&plain, &outside, &map, true, false).unwrap_err();
    assert!(e.starts_with("Out-of-bounds"), "{e}");
    let wider = Side { space: HBM, shape: vec![12, 40], region: dims(&[(0, 2, 1), (0, 12, 1)]) };
    let partial: Vec<u32> = map.iter().map(|&b| b / 8 * 12 + b % 8).collect();
    same_in_both_modes(&plain, &wider, &partial, true, false).unwrap();
    let whole = Side { space: HBM, shape: vec![16], region: Region::full() };
    let rows = Side { space: HBM, shape: vec![16], region: dims(&[(0, 16, 1)]) };
    same_in_both_modes(&whole, &rows, &packed_rows(2, 8), false, false).unwrap();
}

#[test]
fn an_uninitialized_source_fails_the_same_way_directly() {
    // initcheck reads VMEM only: a fresh VMEM source of a stream view.
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode, true);
        let src = rt.allocate_buffer(0, Some(0), BufferSpec::new(VMEM, DType::U8, &[4, 8])).unwrap();
        let dst = pattern(&rt, HBM, &[16], 0);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let req = DmaRequest {
            src_space: VMEM,
            src_region: dims(&[(1, 2, 1), (0, 8, 1)]),
            dst_space: HBM,
            ..common::dma(src, dst, sem)
        };
        let view = DmaView { src: Some(ViewMap::bytes(packed_rows(2, 8))), dst: None };
        let e = match rt.dma_start_view(req, view) {
            Err(e) => e,
            Ok(()) => rt.dma_wait(0, 0, sem, 16).unwrap_err(),
        };
        assert!(e.message.starts_with("Uninitialized read of vmem"), "{mode:?}: {e}");
        assert!(e.message.contains("at [1:3, 0:8]: 16 of the 16"), "{mode:?}: {e}");
        assert_eq!(bytes(&rt, HBM, dst), (0..16).map(|i| (i as u8).wrapping_mul(7)).collect::<Vec<_>>());
    }
}
