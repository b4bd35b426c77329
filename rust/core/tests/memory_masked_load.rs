//! Masked loads (`pl.load(ref, mask=...)`): only selected elements are
//! read; masked-off ones get the fill value and may lie out of bounds; a
//! selected element out of bounds raises (or reads the fill value).

mod memory_support;

use memory_support::*;
use mosaic_rt_core::internals::MemoryTable;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{DType, DimSel, ErrorKind, FillMode, Init, MemorySpace, OobReads, Region};

const HBM: MemorySpace = MemorySpace::Hbm;

fn rows(start: i64, size: i64) -> Region {
    Region::new(vec![DimSel::slice(start, size, 1)])
}

/// An int8 (4, 3) HBM buffer holding 0..12.
fn setup(oob: OobReads, fill: FillMode) -> (MemoryTable, u32) {
    let mem = table(1, 1, oob, fill);
    let init: Vec<u8> = (0..12).collect();
    let id = mem
        .allocate(0, None, BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(HBM, DType::I8, &[4, 3]) })
        .unwrap();
    (mem, id)
}

#[test]
fn masked_off_elements_get_the_fill_value() {
    for (fill, f) in [(FillMode::Nan, 0x7f), (FillMode::Zero, 0)] {
        let (mem, id) = setup(OobReads::Raise, fill);
        let mut out = [0u8; 6];
        let mask = [1, 0, 1, 0, 1, 1];
        mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(1, 2)), &mask, &mut out).unwrap();
        assert_eq!(out, [3, f, 5, f, 7, 8]);
    }
}

#[test]
fn masked_off_out_of_bounds_elements_are_not_read() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut out = [0u8; 9];
    // Rows 2..5: row 4 is out of bounds, and masked off.
    let mask = [1, 1, 1, 0, 1, 0, 0, 0, 0];
    mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(2, 3)), &mask, &mut out).unwrap();
    assert_eq!(out, [6, 7, 8, 0x7f, 10, 0x7f, 0x7f, 0x7f, 0x7f]);
    // Entirely out of bounds, nothing selected.
    mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(4, 3)), &[0; 9], &mut out).unwrap();
    assert_eq!(out, [0x7f; 9]);
}

#[test]
fn a_selected_out_of_bounds_element_raises_or_reads_the_fill_value() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut out = [0u8; 9];
    let mask = [0, 0, 0, 0, 0, 0, 0, 1, 0];
    let e = mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(2, 3)), &mask, &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index);
    assert!(e.message.starts_with("Out-of-bounds masked read of (0 0 hbm 100)"), "{}", e.message);
    let (mem, id) = setup(OobReads::Uninitialized, FillMode::Zero);
    let mask = [1, 0, 0, 0, 0, 0, 0, 1, 0];
    mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(2, 3)), &mask, &mut out).unwrap();
    assert_eq!(out, [6, 0, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn a_mask_of_the_wrong_length_is_a_value_error() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut out = [0u8; 6];
    let e = mem.load_masked(MemRef::new(0, 0, HBM, id, &rows(0, 2)), &[1; 5], &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("mask"), "{}", e.message);
}
