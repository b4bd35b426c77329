//! DMAs through views of sub-byte types (`ViewMap::Units`): int4 rows
//! packed into int32 words and back (SparseCore row packing), nibbles of
//! wider elements written alone, eager / on_wait, remote, and the checks.
//! Simulated memory keeps one int4 element per byte (low nibble).

mod common;

use mosaic_rt_core::{
    BufferKey, BufferSpec, Config, DType, DmaMode, DmaRequest, DmaView, ErrorKind, Init, MemorySpace, Runtime, SemKind,
    UnitLayout, ViewMap,
};
use std::time::Duration;

const MODES: [DmaMode; 2] = [DmaMode::Eager, DmaMode::OnWait];

fn runtime(devices: u32, mode: DmaMode) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        dma_mode: mode,
        wait_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap()
}

/// A buffer of `dtype` holding `bytes` (one byte per sub-byte element).
fn buffer(rt: &Runtime, device: u32, space: MemorySpace, dtype: DType, shape: &[usize], bytes: &[u8]) -> u32 {
    let spec = BufferSpec { init: Init::Bytes(bytes), ..BufferSpec::new(space, dtype, shape) };
    rt.allocate_buffer(device, Some(0), spec).unwrap()
}

fn bytes(rt: &Runtime, device: u32, space: MemorySpace, id: u32) -> Vec<u8> {
    rt.buffer_bytes(BufferKey { space, id, device, core: 0 }).unwrap()
}

fn request(src: u32, dst: u32, sem: u32) -> DmaRequest {
    common::dma(src, dst, sem)
}

fn units(map: &[u32], unit: u8, region: u8, view: u8) -> Option<ViewMap> {
    Some(ViewMap::units(map, UnitLayout { unit, region, view }))
}

/// An int4 (8, 2) value seen as int32 (1, 2) (`bitcast_array`: 8 rows fold
/// into one, row k in nibble k): unit `8j + k` of the view is element
/// (k, j), unit `2k + j`, of the region.
fn packing_map() -> Vec<u32> {
    (0..16).map(|n| 2 * (n % 8) + n / 8).collect()
}

/// Elements of an int4 (8, 2) value, stored one per byte (-1 is 0x0f).
const INT4: [u8; 16] = [1, 0xf, 2, 0xe, 3, 0xd, 4, 0xc, 5, 0xb, 6, 0xa, 7, 9, 8, 0];

/// The two int32 words `INT4` packs into, little-endian bytes.
fn packed_words() -> Vec<u8> {
    let word = |j: usize| (0..8).fold(0u32, |w, k| w | (INT4[2 * k + j] as u32) << (4 * k));
    [word(0), word(1)].iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn int4_rows_pack_into_int32_words() {
    for mode in MODES {
        let rt = runtime(1, mode);
        let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I4, &[8, 2], &INT4);
        let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::I32, &[2], &[0; 8]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: units(&packing_map(), 4, 4, 8), dst: None };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 8).unwrap();
        assert_eq!(bytes(&rt, 0, MemorySpace::Vmem, dst), packed_words(), "{mode:?}");
        assert_eq!(packed_words()[..4], 0x8765_4321u32.to_le_bytes(), "column 0 holds rows 0..8 low to high");
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}: the semaphore counted the view's 8 bytes");
    }
}

#[test]
fn int32_words_unpack_into_int4_rows() {
    for mode in MODES {
        let rt = runtime(1, mode);
        let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I32, &[2], &packed_words());
        let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::I4, &[8, 2], &[7; 16]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: None, dst: units(&packing_map(), 4, 4, 8) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 8).unwrap();
        // Canonical: one element per byte, high nibble zero.
        assert_eq!(bytes(&rt, 0, MemorySpace::Vmem, dst), INT4, "{mode:?}");
    }
}

#[test]
fn nibbles_of_wider_elements_move_alone() {
    for mode in MODES {
        let rt = runtime(1, mode);
        // An int32 word seen as 8 int4 rows; rows 2..5 written, the rest kept.
        let word = 0xaaaa_aaaau32.to_le_bytes();
        let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I4, &[3], &[1, 2, 0xf]);
        let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::I32, &[1], &word);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let view = DmaView { src: None, dst: units(&[2, 3, 4], 4, 8, 4) };
        rt.dma_start_view(request(src, dst, sem), view).unwrap();
        rt.dma_wait(0, 0, sem, 3).unwrap();
        assert_eq!(bytes(&rt, 0, MemorySpace::Vmem, dst), 0xaaaf_21aau32.to_le_bytes(), "{mode:?}");
        // ... and read alone: rows 7, 0 of the word as two int4 elements.
        let back = buffer(&rt, 0, MemorySpace::Vmem, DType::I4, &[2], &[0, 0]);
        let mut req = request(dst, back, sem);
        req.src_space = MemorySpace::Vmem;
        rt.dma_start_view(req, DmaView { src: units(&[7, 0], 4, 8, 4), dst: None }).unwrap();
        rt.dma_wait(0, 0, sem, 2).unwrap();
        assert_eq!(bytes(&rt, 0, MemorySpace::Vmem, back), [0xa, 0xa], "{mode:?}");
    }
}

#[test]
fn two_bit_units_split_int4_elements() {
    // Units of 2 bits: two per stored int4 element; a uint8 view of them.
    let rt = runtime(1, DmaMode::Eager);
    let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I4, &[2], &[0x9, 0x6]);
    let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::U8, &[1], &[0]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let view = DmaView { src: units(&[1, 0, 3, 2], 2, 4, 8), dst: None };
    rt.dma_start_view(request(src, dst, sem), view).unwrap();
    // 0x9 = units (0b01, 0b10), 0x6 = (0b10, 0b01); each pair swapped, low unit first.
    assert_eq!(bytes(&rt, 0, MemorySpace::Vmem, dst), [0b1001_0110]);
    rt.dma_wait(0, 0, sem, 1).unwrap();
}

#[test]
fn remote_copies_through_unit_maps() {
    for mode in MODES {
        let rt = runtime(2, mode);
        let src = buffer(&rt, 0, MemorySpace::Vmem, DType::I4, &[8, 2], &INT4);
        let dst = buffer(&rt, 1, MemorySpace::Vmem, DType::I4, &[8, 2], &[0; 16]);
        let send = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let recv = rt.allocate_semaphores(1, None, SemKind::Dma, 1).unwrap();
        let mut req = request(src, dst, recv);
        (req.src_space, req.src_sem, req.dst_device) = (MemorySpace::Vmem, Some(send), Some(1));
        // Packed to words on device 0, unpacked on device 1: the identity.
        let view = DmaView { src: units(&packing_map(), 4, 4, 8), dst: units(&packing_map(), 4, 4, 8) };
        rt.dma_start_view(req, view).unwrap();
        rt.dma_wait(1, 0, recv, 8).unwrap();
        rt.dma_wait(0, 0, send, 8).unwrap();
        assert_eq!(bytes(&rt, 1, MemorySpace::Vmem, dst), INT4, "{mode:?}");
        assert!(rt.leaks(None).unwrap().is_empty(), "{mode:?}");
    }
}

#[test]
fn bad_unit_maps_fail_at_the_start() {
    for mode in MODES {
        let rt = runtime(1, mode);
        let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I4, &[8, 2], &INT4);
        let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::I32, &[2], &[0; 8]);
        let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
        let mut map = packing_map();
        map[3] = 16;
        let outside = DmaView { src: units(&map, 4, 4, 8), dst: None };
        let e = rt.dma_start_view(request(src, dst, sem), outside).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{mode:?}");
        assert!(e.message.contains("outside its region of 16 bytes (4-bit unit 16)"), "{}", e.message);
        let short = DmaView { src: units(&[0, 1, 2], 4, 4, 8), dst: None };
        let e = rt.dma_start_view(request(src, dst, sem), short).unwrap_err();
        assert!(e.message.contains("not whole bytes"), "{mode:?}: {}", e.message);
        let bad = DmaView { src: units(&packing_map(), 3, 4, 8), dst: None };
        let e = rt.dma_start_view(request(src, dst, sem), bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal, "{mode:?}: {}", e.message);
    }
}

#[test]
fn a_map_made_for_another_dtype_is_an_internal_error() {
    // Region bits 8 (a byte-sized type) but the buffer is int4.
    let rt = runtime(1, DmaMode::Eager);
    let src = buffer(&rt, 0, MemorySpace::Hbm, DType::I4, &[8, 2], &INT4);
    let dst = buffer(&rt, 0, MemorySpace::Vmem, DType::I32, &[2], &[0; 8]);
    let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
    let view = DmaView { src: units(&(0..8).collect::<Vec<_>>(), 4, 8, 8), dst: None };
    let e = rt.dma_start_view(request(src, dst, sem), view).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("made for 8 bits per stored byte, but its region is int4"), "{}", e.message);
}
