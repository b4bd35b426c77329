//! Out-of-bounds rules and stock's exact error texts for load, store, swap
//! (plain and masked) and buffer-to-buffer copies.

mod memory_support;

use memory_support::*;
use mosaic_rt_core::internals::MemoryTable;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{BufferKey, DType, DimSel, ErrorKind, FillMode, Init, MemorySpace, OobReads, Region};

const VMEM: MemorySpace = MemorySpace::Vmem;
const HBM: MemorySpace = MemorySpace::Hbm;

fn rows(start: i64, size: i64) -> Region {
    Region::new(vec![DimSel::slice(start, size, 1)])
}

/// An int8 (4, 3) HBM buffer holding 0..12 on a 1-device, 2-core topology.
fn setup(oob: OobReads, fill: FillMode) -> (MemoryTable, u32) {
    let mem = table(1, 2, oob, fill);
    let init: Vec<u8> = (0..12).collect();
    let id = mem
        .allocate(0, None, BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(HBM, DType::I8, &[4, 3]) })
        .unwrap();
    (mem, id)
}

#[test]
fn oob_read_raises_stock_text_with_accessing_core() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut out = [0u8; 9];
    let e = mem.load(MemRef::new(0, 1, HBM, id, &rows(2, 3)), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index);
    assert_eq!(
        e.message,
        "Out-of-bounds read of (0 1 hbm 100): reading [(slice(2, 5, 1),)] but buffer has shape (4, 3)."
    );
    let mut out = [0u8; 1];
    let r = Region::new(vec![DimSel::index(4), DimSel::index(0)]);
    let e = mem.load(MemRef::new(0, 0, HBM, id, &r), &mut out).unwrap_err();
    assert_eq!(e.message, "Out-of-bounds read of (0 0 hbm 100): reading [(4, 0)] but buffer has shape (4, 3).");
    // Strided: rows 1 and 4 -> partially out.
    let mut out = [0u8; 6];
    let r = Region::new(vec![DimSel::slice(1, 2, 3)]);
    let e = mem.load(MemRef::new(0, 0, HBM, id, &r), &mut out).unwrap_err();
    assert_eq!(
        e.message,
        "Out-of-bounds read of (0 0 hbm 100): reading [(slice(1, 7, 3),)] but buffer has shape (4, 3)."
    );
}

#[test]
fn oob_read_uninitialized_fills_and_keeps_the_low_corner() {
    for (fill, f) in [(FillMode::Nan, 0x7f), (FillMode::Zero, 0)] {
        let (mem, id) = setup(OobReads::Uninitialized, fill);
        let mut out = [0u8; 9];
        mem.load(MemRef::new(0, 0, HBM, id, &rows(2, 3)), &mut out).unwrap();
        assert_eq!(out, [6, 7, 8, 9, 10, 11, f, f, f]);
        // Entirely out of bounds.
        mem.load(MemRef::new(0, 0, HBM, id, &rows(4, 3)), &mut out).unwrap();
        assert_eq!(out, [f; 9]);
        // Column window past the end, on two rows.
        let r = Region::new(vec![DimSel::slice(1, 2, 1), DimSel::slice(1, 3, 1)]);
        let mut out = [0u8; 6];
        mem.load(MemRef::new(0, 0, HBM, id, &r), &mut out).unwrap();
        assert_eq!(out, [4, 5, f, 7, 8, f]);
    }
}

#[test]
fn empty_slice_at_the_end_counts_as_out_of_bounds_for_reads_like_stock() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let e = mem.load(MemRef::new(0, 0, HBM, id, &rows(4, 0)), &mut []).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index);
    // ...but not for writes (nothing is written).
    mem.store(MemRef::new(0, 0, HBM, id, &rows(4, 0)), &[]).unwrap();
    mem.load(MemRef::new(0, 0, HBM, id, &rows(3, 0)), &mut []).unwrap();
}

#[test]
fn oob_write_is_its_own_kind_with_stock_text_and_writes_nothing() {
    let (mem, id) = setup(OobReads::Uninitialized, FillMode::Nan);
    let before = mem.content(BufferKey { space: HBM, id, device: 0, core: 0 }).unwrap();
    let e = mem.store(MemRef::new(0, 1, HBM, id, &rows(3, 2)), &[0; 6]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfBoundsWrite);
    assert_eq!(
        e.message,
        "Out-of-bounds write of (0 1 hbm 100): writing [(slice(3, 5, 1),)] but buffer has shape (4, 3) ."
    );
    let r = Region::new(vec![DimSel::index(0), DimSel::slice(1, 2, 2)]);
    let e = mem.store(MemRef::new(0, 0, HBM, id, &r), &[0; 2]).unwrap_err();
    assert_eq!(
        e.message,
        "Out-of-bounds write of (0 0 hbm 100): writing [(0, slice(1, 5, 2))] but buffer has shape (4, 3) ."
    );
    assert_eq!(mem.content(BufferKey { space: HBM, id, device: 0, core: 0 }).unwrap(), before);
}

#[test]
fn error_texts_show_the_logical_shape() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec { logical_shape: Some(&[5, 100]), ..BufferSpec::new(VMEM, DType::F32, &[8, 128]) },
        )
        .unwrap();
    let mut out = vec![0u8; 9 * 100 * 4];
    let e = mem.load(MemRef::new(0, 0, VMEM, id, &rows(0, 9)), &mut out).unwrap_err();
    assert_eq!(
        e.message,
        "Out-of-bounds read of (0 0 vmem 100): reading [(slice(0, 9, 1),)] but buffer has shape (5, 100)."
    );
    let scalar = mem.allocate(0, Some(0), BufferSpec::new(MemorySpace::Smem, DType::I32, &[2])).unwrap();
    let e = mem
        .store(MemRef::new(0, 0, MemorySpace::Smem, scalar, &Region::new(vec![DimSel::index(2)])), &[0; 4])
        .unwrap_err();
    assert_eq!(e.message, "Out-of-bounds write of (0 0 smem 101): writing [(2,)] but buffer has shape (2,) .");
}

#[test]
fn wrong_byte_lengths_and_bad_regions_are_value_errors() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut out = [0u8; 5];
    let e = mem.load(MemRef::new(0, 0, HBM, id, &rows(0, 2)), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("has 5 bytes but the region has shape (2, 3) and needs 6 bytes"), "{e}");
    assert_eq!(mem.store(MemRef::new(0, 0, HBM, id, &rows(0, 2)), &[0; 7]).unwrap_err().kind, ErrorKind::Value);
    let mut out6 = [0u8; 6];
    let e = mem.swap(MemRef::new(0, 0, HBM, id, &rows(0, 2)), &[0; 6], Some(&[1; 5]), &mut out6).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    for bad in [
        Region::new(vec![DimSel::slice(-1, 1, 1)]),
        Region::new(vec![DimSel::slice(0, 1, 0)]),
        Region::new(vec![DimSel::index(0), DimSel::index(0), DimSel::index(0)]),
    ] {
        let e = mem.load(MemRef::new(0, 0, HBM, id, &bad), &mut []).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value, "{bad:?}");
    }
    let e = mem.load(MemRef::new(0, 2, HBM, id, &rows(0, 2)), &mut out6).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("core id 2 out of range"), "{e}");
}

#[test]
fn swap_returns_old_values_and_writes_new_ones() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let mut old = [0u8; 3];
    mem.swap(MemRef::new(0, 0, HBM, id, &Region::new(vec![DimSel::index(1)])), &[20, 21, 22], None, &mut old).unwrap();
    assert_eq!(old, [3, 4, 5]);
    let key = BufferKey { space: HBM, id, device: 0, core: 0 };
    assert_eq!(mem.content(key).unwrap()[3..6], [20, 21, 22]);
    // Partly out of bounds: error, nothing written.
    let mut out = [0u8; 6];
    let e = mem.swap(MemRef::new(0, 1, HBM, id, &rows(3, 2)), &[0; 6], None, &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfBoundsWrite);
    assert_eq!(
        e.message,
        "Out-of-bounds swap of (0 1 hbm 100): swapping [(slice(3, 5, 1),)] but buffer has shape (4, 3) ."
    );
    let e = mem.swap(MemRef::new(0, 1, HBM, id, &rows(4, 2)), &[0; 6], None, &mut out).unwrap_err();
    assert!(e.message.starts_with("Out-of-bounds swap of"), "{e}");
    assert_eq!(mem.content(key).unwrap()[9..12], [9, 10, 11]);
}

#[test]
fn masked_swap() {
    let (mem, id) = setup(OobReads::Raise, FillMode::Nan);
    let key = BufferKey { space: HBM, id, device: 0, core: 0 };
    // In bounds: out = where(mask, old, data); content = where(mask, data, old).
    let mut out = [0u8; 3];
    let r = Region::new(vec![DimSel::index(0)]);
    mem.swap(MemRef::new(0, 0, HBM, id, &r), &[50, 51, 52], Some(&[1, 0, 1]), &mut out).unwrap();
    assert_eq!(out, [0, 51, 2]);
    assert_eq!(mem.content(key).unwrap()[0..3], [50, 1, 52]);
    // Partly out of bounds with the mask false outside: allowed.
    let mut out = [0u8; 6];
    let data = [60, 61, 62, 63, 64, 65];
    mem.swap(MemRef::new(0, 0, HBM, id, &rows(3, 2)), &data, Some(&[0, 1, 0, 0, 0, 0]), &mut out).unwrap();
    assert_eq!(out, [60, 10, 62, 63, 64, 65]);
    assert_eq!(mem.content(key).unwrap()[9..12], [9, 61, 11]);
    // Mask true on an out-of-bounds element: error (note stock's trailing space), no write.
    let e = mem.swap(MemRef::new(0, 1, HBM, id, &rows(3, 2)), &data, Some(&[1, 0, 0, 0, 0, 1]), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfBoundsWrite);
    assert_eq!(
        e.message,
        "Out-of-bounds masked swap of (0 1 hbm 100): swapping [(slice(3, 5, 1),)] but buffer has shape (4, 3) . "
    );
    assert_eq!(mem.content(key).unwrap()[9..12], [9, 61, 11]);
    // Out of bounds in the LAST dim only (a column window past the end).
    let r = Region::new(vec![DimSel::slice(0, 2, 1), DimSel::slice(2, 2, 1)]);
    let mut out = [0u8; 4];
    let e = mem.swap(MemRef::new(0, 0, HBM, id, &r), &[0; 4], Some(&[0, 1, 0, 0]), &mut out).unwrap_err();
    assert!(e.message.starts_with("Out-of-bounds masked swap"), "{e}");
    mem.swap(MemRef::new(0, 0, HBM, id, &r), &[70, 71, 72, 73], Some(&[1, 0, 1, 0]), &mut out).unwrap();
    assert_eq!(out, [52, 71, 5, 73]);
    // Entirely out of bounds: the masked error even with an all-false mask.
    let e = mem.swap(MemRef::new(0, 0, HBM, id, &rows(4, 2)), &[0; 6], Some(&[0; 6]), &mut [0; 6]).unwrap_err();
    assert!(e.message.starts_with("Out-of-bounds masked swap"), "{e}");
}

#[test]
fn swaps_only_write_within_the_logical_shape() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec {
                logical_shape: Some(&[2, 3]),
                init: Init::Bytes(&[1, 2, 3, 4, 5, 6]),
                ..BufferSpec::new(VMEM, DType::U8, &[2, 4])
            },
        )
        .unwrap();
    let key = BufferKey { space: VMEM, id, device: 0, core: 0 };
    let r = Region::new(vec![DimSel::index(0), DimSel::slice(0, 4, 1)]);
    let mut out = [0u8; 4];
    mem.swap(MemRef::new(0, 0, VMEM, id, &r), &[9, 9, 9, 9], None, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 0]);
    mem.swap(
        MemRef::new(0, 0, VMEM, id, &Region::new(vec![DimSel::index(1), DimSel::slice(0, 4, 1)])),
        &[8; 4],
        Some(&[1, 0, 1, 1]),
        &mut out,
    )
    .unwrap();
    assert_eq!(out, [4, 8, 6, 0]);
    assert_eq!(mem.content(key).unwrap(), [9, 9, 9, 0, 8, 5, 8, 0]);
}

fn mref(space: MemorySpace, id: u32, region: &Region) -> MemRef<'_> {
    MemRef { device: 0, core: 1, space, id, region }
}

#[test]
fn copies_between_buffers() {
    let (mem, src) = setup(OobReads::Raise, FillMode::Zero);
    let dst = mem.allocate(0, Some(1), BufferSpec::new(VMEM, DType::I8, &[2, 3])).unwrap();
    let whole = Region::full();
    let r = Region::new(vec![DimSel::slice(1, 2, 2)]);
    assert_eq!(mem.copy(mref(HBM, src, &r), mref(VMEM, dst, &whole)).unwrap(), 6);
    assert_eq!(mem.content(BufferKey { space: VMEM, id: dst, device: 0, core: 1 }).unwrap(), [3, 4, 5, 9, 10, 11]);
    // Shape mismatch.
    let e = mem.copy(mref(HBM, src, &rows(0, 3)), mref(VMEM, dst, &whole)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("int8 (3, 3)") && e.message.contains("int8 (2, 3)"), "{e}");
    // Read errors come first, then write errors.
    let e = mem.copy(mref(HBM, src, &rows(3, 2)), mref(VMEM, dst, &whole)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index);
    let e = mem.copy(mref(HBM, src, &rows(0, 1)), mref(VMEM, dst, &rows(2, 1))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfBoundsWrite);
    assert!(e.message.starts_with("Out-of-bounds write of (0 1 vmem 101)"), "{e}");
    // Overlapping copy within one buffer reads everything before writing.
    assert_eq!(mem.copy(mref(HBM, src, &rows(0, 3)), mref(HBM, src, &rows(1, 3))).unwrap(), 9);
    let key = BufferKey { space: HBM, id: src, device: 0, core: 0 };
    assert_eq!(mem.content(key).unwrap(), [0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn uninitialized_copy_reads_fill_values() {
    let (mem, src) = setup(OobReads::Uninitialized, FillMode::Nan);
    let dst = mem
        .allocate(0, Some(0), BufferSpec { init: Init::Bytes(&[0; 6]), ..BufferSpec::new(VMEM, DType::I8, &[2, 3]) })
        .unwrap();
    let whole = Region::full();
    let r = rows(3, 2);
    let bytes = mem
        .copy(
            MemRef { device: 0, core: 0, space: HBM, id: src, region: &r },
            MemRef { device: 0, core: 0, space: VMEM, id: dst, region: &whole },
        )
        .unwrap();
    assert_eq!(bytes, 6);
    assert_eq!(
        mem.content(BufferKey { space: VMEM, id: dst, device: 0, core: 0 }).unwrap(),
        [9, 10, 11, 0x7f, 0x7f, 0x7f]
    );
}

/// Out-of-bounds reads "tpu": a kernel's load of VMEM past the buffer reads
/// the fill value there and is reported once (a TPU does not check loads);
/// a DMA's read of the same region, and a kernel load of HBM, still raise.
#[test]
fn tpu_reads_leave_kernel_loads_of_vmem_unchecked_and_dma_reads_checked() {
    let mem = table(1, 1, OobReads::Tpu, FillMode::Zero);
    let init: Vec<u8> = (1..=12).collect();
    let spec = |space| BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(space, DType::I8, &[4, 3]) };
    let vmem = mem.allocate(0, Some(0), spec(VMEM)).unwrap();
    let hbm = mem.allocate(0, None, spec(HBM)).unwrap();
    mosaic_rt_core::reports::take_all();
    let mut out = [0xAAu8; 6];
    // Rows 3..5 of 4: row 3 is read, row 4 is the fill value (zero).
    mem.kernel_load(MemRef::new(0, 0, VMEM, vmem, &rows(3, 2)), &mut out).unwrap();
    assert_eq!(out, [10, 11, 12, 0, 0, 0]);
    mem.kernel_load(MemRef::new(0, 0, VMEM, vmem, &rows(3, 2)), &mut out).unwrap();
    // (Other tests of this binary may queue reports of their own.)
    let reports: Vec<_> =
        mosaic_rt_core::reports::take_all().into_iter().filter(|r| r.text.starts_with("load of VMEM")).collect();
    assert_eq!(reports.len(), 1, "one report per source line");
    assert!(
        reports[0]
            .text
            .contains("load of VMEM buffer (0 0 vmem 100) reading [(slice(3, 5, 1),)] outside its shape (4, 3)"),
        "{}",
        reports[0].text
    );
    let e = mem.load(MemRef::new(0, 0, VMEM, vmem, &rows(3, 2)), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index, "a DMA's read is checked");
    let e = mem.kernel_load(MemRef::new(0, 0, HBM, hbm, &rows(3, 2)), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Index, "HBM is reached by DMAs only: checked");
    // "raise" keeps stock's error for kernel loads too.
    let strict = table(1, 1, OobReads::Raise, FillMode::Zero);
    let v = strict.allocate(0, Some(0), spec(VMEM)).unwrap();
    let e = strict.kernel_load(MemRef::new(0, 0, VMEM, v, &rows(3, 2)), &mut out).unwrap_err();
    assert!(e.message.starts_with("Out-of-bounds read of (0 0 vmem 100)"), "{}", e.message);
}

/// A scalar read of SMEM outside its array (`sizes[e - 2]` at e = 0, or one
/// past the end): under "tpu" a kernel's load reads the fill value, as a
/// TPU's scalar core reads the word there; under "raise" -- chosen by the
/// user, or for a DMA's read -- it is stock's error, at either end.
#[test]
fn scalar_smem_reads_outside_follow_the_rule() {
    const SMEM: MemorySpace = MemorySpace::Smem;
    let init: Vec<u8> = (1..=4).collect();
    let spec = BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(SMEM, DType::I8, &[4]) };
    let at = |i| Region::new(vec![DimSel::index(i)]);
    let mut out = [0xAAu8; 1];

    let tpu = table(1, 1, OobReads::Tpu, FillMode::Zero);
    let s = tpu.allocate(0, Some(0), spec).unwrap();
    for i in [-2, 4] {
        out[0] = 0xAA;
        tpu.kernel_load(MemRef::new(0, 0, SMEM, s, &at(i)), &mut out).unwrap();
        assert_eq!(out, [0], "index {i}: the fill value");
        let e = tpu.load(MemRef::new(0, 0, SMEM, s, &at(i)), &mut out).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Index, "index {i}: a DMA's read is checked");
    }
    tpu.kernel_load(MemRef::new(0, 0, SMEM, s, &at(3)), &mut out).unwrap();
    assert_eq!(out, [4]);

    let strict = table(1, 1, OobReads::Raise, FillMode::Zero);
    let s = strict.allocate(0, Some(0), spec).unwrap();
    for i in [-2, 4] {
        let e = strict.kernel_load(MemRef::new(0, 0, SMEM, s, &at(i)), &mut out).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Index, "index {i}");
        assert!(e.message.starts_with("Out-of-bounds read of (0 0 smem "), "{}", e.message);
    }
}
