//! DMAs through ref views (`DmaView`): byte maps on either side, in eager
//! and on_wait modes; semaphores count the view's bytes; bad maps are
//! value errors at the start.

mod common;

use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DmaMode, DmaRequest, DmaView, ErrorKind, Init, MemorySpace, Region, Runtime,
    SemKind, ViewMap,
};
use std::time::Duration;

fn runtime(mode: DmaMode) -> Runtime {
    Runtime::new(Config { dma_mode: mode, wait_timeout: Some(Duration::from_secs(60)), ..Config::default() }).unwrap()
}

/// A u8 buffer of `bytes` in `space` of device 0, core 0.
fn buffer(rt: &Runtime, space: MemorySpace, bytes: &[u8]) -> u32 {
    let shape = [bytes.len()];
    let spec = BufferSpec { init: Init::Bytes(bytes), ..BufferSpec::new(space, DType::U8, &shape) };
    rt.allocate_buffer(0, Some(0), spec).unwrap()
}

fn bytes(rt: &Runtime, space: MemorySpace, id: u32) -> Vec<u8> {
    rt.buffer_bytes(BufferKey { space, id, device: 0, core: 0 }).unwrap()
}

fn request(src: u32, dst: u32, sem: u32) -> DmaRequest {
    common::dma(src, dst, sem)
}

fn map(m: &[u32]) -> Option<ViewMap> {
    Some(ViewMap::bytes(m))
}

#[test]
fn maps_gather_the_source_and_scatter_into_the_destination() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[10, 11, 12, 13, 14, 15]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 5]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        // 3 bytes: source bytes 5, 0, 2 into destination bytes 4, 1, 3 (0 and 2 keep theirs).
        let view = DmaView { src: map(&[5, 0, 2]), dst: map(&[4, 1, 3]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 3).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [0, 10, 0, 12, 15], "{mode:?}");
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}: the semaphore counted the view's 3 bytes");
    }
}

#[test]
fn same_bytes_views_only_need_equal_byte_counts() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: Some(ViewMap::Same), dst: map(&[3, 2, 1, 0]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 4).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [4, 3, 2, 1], "{mode:?}");
    }
}

#[test]
fn bad_maps_fail_at_the_start() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let outside = DmaView { src: map(&[0, 9]), dst: map(&[0, 1]) };
        let e = rt.dma_start_view(request(src, dst, sem), outside).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{mode:?}");
        assert!(e.message.contains("source view reaches outside its region of 4 bytes (byte 9)"), "{}", e.message);
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[0; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let sizes = DmaView { src: map(&[0, 1]), dst: Some(ViewMap::Same) };
        let e = rt.dma_start_view(request(src, dst, sem), sizes).unwrap_err();
        assert!(e.message.contains("2 bytes") && e.message.contains("4"), "{mode:?}: {}", e.message);
    }
}

/// An i32 buffer of `shape` in `space` whose byte `k` is `k % 251`.
fn pattern_buffer(rt: &Runtime, space: MemorySpace, shape: &[usize]) -> (u32, Vec<u8>) {
    let n: usize = shape.iter().product::<usize>() * 4;
    let bytes: Vec<u8> = (0..n).map(|k| (k % 251) as u8).collect();
    let spec = BufferSpec { init: Init::Bytes(&bytes), ..BufferSpec::new(space, DType::I32, shape) };
    (rt.allocate_buffer(0, Some(0), spec).unwrap(), bytes)
}

#[test]
fn a_map_touching_a_few_rows_of_a_large_region_moves_just_those_rows() {
    use mosaic_rt_core::DimSel;
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let (src, src_bytes) = pattern_buffer(&rt, MemorySpace::Hbm, &[64, 8]);
        let (dst, mut want) = pattern_buffer(&rt, MemorySpace::Vmem, &[64, 8]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        // Source region: rows 4, 6, .., 58 (28 rows of 32 bytes; and the
        // whole second dim, listed); the view takes 10 bytes of its rows 20
        // and 3.
        let src_region = Region::new(vec![DimSel::slice(4, 28, 2), DimSel::slice(0, 8, 1)]);
        let src_map: Vec<u32> = (0..6).map(|b| 20 * 32 + b).chain((0..4).map(|b| 3 * 32 + 8 + b)).collect();
        // Destination region: row 9 (squeezed), a value of 8 elements; the
        // view writes bytes 0-1 of element 2 (its bytes 2-3 stay) and all
        // of elements 5 and 6.
        let dst_region = Region::new(vec![DimSel::index(9)]);
        let dst_map: Vec<u32> = [8, 9].into_iter().chain(20..28).collect();
        let view = DmaView { src: map(&src_map), dst: map(&dst_map) };
        let mut req = request(src, dst, sem);
        req.src_region = src_region;
        req.dst_region = dst_region;
        rt.dma_start_view(req, view).unwrap();
        rt.dma_wait(0, 0, sem, 10).unwrap();
        for (&s, &d) in src_map.iter().zip(&dst_map) {
            // Source value byte s: region row s / 32 is buffer row 4 + 2 * (s / 32).
            let (row, within) = (s as usize / 32, s as usize % 32);
            want[9 * 32 + d as usize] = src_bytes[(4 + 2 * row) * 32 + within];
        }
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), want, "{mode:?}");
    }
}

#[test]
fn a_row_gather_agrees_with_the_whole_region_copy() {
    // The same gather through a map that touches many rows (the dense path)
    // and few (the row path): the bytes agree.
    for rows in [2usize, 40] {
        let rt = runtime(DmaMode::Eager);
        let (src, src_bytes) = pattern_buffer(&rt, MemorySpace::Hbm, &[48, 4]);
        let (dst, _) = pattern_buffer(&rt, MemorySpace::Vmem, &[rows, 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let picks: Vec<u32> = (0..rows as u32).map(|i| (i * 7 + 3) % 48).collect();
        let src_map: Vec<u32> = picks.iter().flat_map(|&r| (0..16).map(move |b| r * 16 + b)).collect();
        let view = DmaView { src: map(&src_map), dst: None };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, (rows * 16) as i64).unwrap();
        let want: Vec<u8> = src_map.iter().map(|&b| src_bytes[b as usize]).collect();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), want, "{rows} rows");
    }
}

#[test]
fn a_row_gather_keeps_the_regions_later_dims() {
    use mosaic_rt_core::DimSel;
    let rt = runtime(DmaMode::Eager);
    let (src, src_bytes) = pattern_buffer(&rt, MemorySpace::Hbm, &[32, 8]);
    let (dst, _) = pattern_buffer(&rt, MemorySpace::Vmem, &[2]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    // Region: every row, columns 2..5 (3 elements = 12 bytes a row); the
    // view takes element 1 of region rows 7 and 30.
    let mut req = request(src, dst, sem);
    req.src_region = Region::new(vec![DimSel::slice(0, 32, 1), DimSel::slice(2, 3, 1)]);
    let src_map: Vec<u32> = (7 * 12 + 4..7 * 12 + 8).chain(30 * 12 + 4..30 * 12 + 8).collect();
    rt.dma_start_view(req, DmaView { src: map(&src_map), dst: None }).unwrap();
    rt.dma_wait(0, 0, sem, 8).unwrap();
    let want: Vec<u8> = [(7usize, 3usize), (30, 3)]
        .iter()
        .flat_map(|&(row, col)| src_bytes[(row * 8 + col) * 4..(row * 8 + col) * 4 + 4].to_vec())
        .collect();
    assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), want);
}

#[test]
fn a_full_length_map_with_repeats_keeps_the_bytes_it_misses() {
    // A scatter with a repeated index: as long as the region, yet byte 3 is
    // not written and must keep its value (a length shortcut zeroed it).
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(mode);
        let src = buffer(&rt, MemorySpace::Hbm, &[1, 2, 3, 4]);
        let dst = buffer(&rt, MemorySpace::Vmem, &[9; 4]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: None, dst: map(&[0, 0, 1, 2]) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 4).unwrap();
        assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), [2, 3, 4, 9], "{mode:?}");
    }
}

#[test]
fn a_row_gather_whose_runs_cross_rows_moves_them_byte_by_byte() {
    // Rows of 12 bytes and a map of aligned runs of 8 bytes: the run at 8
    // spans rows 0 and 1 (the row path cannot move it as one piece).
    let rt = runtime(DmaMode::Eager);
    let (src, src_bytes) = pattern_buffer(&rt, MemorySpace::Hbm, &[32, 3]);
    let (dst, _) = pattern_buffer(&rt, MemorySpace::Vmem, &[4]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let src_map: Vec<u32> = (8..16).chain(96..104).collect();
    rt.dma_start_view(request(src, dst, sem), DmaView { src: map(&src_map), dst: None }).unwrap();
    rt.dma_wait(0, 0, sem, 16).unwrap();
    let want: Vec<u8> = src_map.iter().map(|&b| src_bytes[b as usize]).collect();
    assert_eq!(bytes(&rt, MemorySpace::Vmem, dst), want);
}

/// A gather / scatter map made of rows (`ViewEntries::rows`: a pattern per
/// row, shifted by each row's start) moves exactly the bytes of the same
/// map made whole, through the row path, on both sides: starts that are not
/// row-aligned (a column offset), starts that break the pattern's runs,
/// repeated rows, a pattern spanning two rows (a row-packing bitcast).
#[test]
fn a_map_made_of_rows_moves_what_the_same_map_made_whole_moves() {
    use mosaic_rt_core::ViewEntries;
    use std::sync::Arc;
    // Rows of 32 bytes. Patterns: 2 bytes of each of two rows in turn,
    // four words' worth, as a bf16 -> u32 bitcast does; a byte of each of
    // four rows in turn (int8 -> u32); 16 bytes of one row (a plain
    // gather); and one that is none of these (its runs out of order).
    let patterns: [Vec<u32>; 4] = [
        (0..16u32).map(|n| (n / 2 % 2) * 32 + (n / 4) * 2 + n % 2).collect(),
        (0..16u32).map(|n| (n % 4) * 32 + n / 4).collect(),
        (0..16u32).collect(),
        (0..16u32).map(|n| (n / 2 % 2) * 32 + (3 - n / 4) * 2 + n % 2).collect(),
    ];
    let cases: [&[u32]; 4] = [&[64, 0, 512, 64], &[70, 6, 1800], &[71, 3], &[1936]];
    // Rows of one dim (a DMA moves just the columns it touches) and of two
    // (whole rows).
    let shapes = [[64, 8, 1], [32, 2, 8]];
    for (pattern, shape, starts) in
        patterns.iter().flat_map(|p| shapes.iter().flat_map(move |s| cases.map(|c| (p, s, c))))
    {
        let pattern = Arc::new(ViewEntries::new(pattern.clone()));
        let shape: Vec<usize> = shape.iter().copied().filter(|&n| n > 1).collect();
        let rows = ViewEntries::rows(starts, &pattern);
        assert!(rows.row_form().is_some());
        let whole = ViewEntries::new(rows.to_vec());
        for mode in [DmaMode::Eager, DmaMode::OnWait] {
            let n = rows.len();
            let load = |m: ViewEntries| {
                let rt = runtime(mode);
                let (src, _) = pattern_buffer(&rt, MemorySpace::Hbm, &shape);
                let (dst, _) = pattern_buffer(&rt, MemorySpace::Vmem, &[n / 4]);
                let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
                let view = DmaView { src: Some(ViewMap::Bytes(Arc::new(m))), dst: None };
                rt.dma_start_view(request(src, dst, sem), view).unwrap();
                rt.dma_wait(0, 0, sem, n as i64).unwrap();
                bytes(&rt, MemorySpace::Vmem, dst)
            };
            let got = load(ViewEntries::rows(starts, &pattern));
            assert_eq!(got, load(whole.clone()), "load {:?} {shape:?} {starts:?} {mode:?}", &pattern[..]);
            let store = |m: ViewEntries| {
                let rt = runtime(mode);
                let (src, _) = pattern_buffer(&rt, MemorySpace::Vmem, &[n / 4]);
                let (dst, _) = pattern_buffer(&rt, MemorySpace::Hbm, &shape);
                let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
                let mut req = request(src, dst, sem);
                (req.src_space, req.dst_space) = (MemorySpace::Vmem, MemorySpace::Hbm);
                let view = DmaView { src: None, dst: Some(ViewMap::Bytes(Arc::new(m))) };
                rt.dma_start_view(req, view).unwrap();
                rt.dma_wait(0, 0, sem, n as i64).unwrap();
                bytes(&rt, MemorySpace::Hbm, dst)
            };
            let got = store(ViewEntries::rows(starts, &pattern));
            assert_eq!(got, store(whole.clone()), "store {:?} {shape:?} {starts:?} {mode:?}", &pattern[..]);
        }
    }
}
