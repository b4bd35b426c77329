//! Allocation rules: id sequences, HBM sharing and ref counts, shape and
//! init validation, fill values, padding, every dtype round-trip.

mod memory_support;

use memory_support::*;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{BufferKey, DType, DimSel, ErrorKind, FillMode, Init, MemorySpace, OobReads, Region};

const VMEM: MemorySpace = MemorySpace::Vmem;
const HBM: MemorySpace = MemorySpace::Hbm;

fn key(space: MemorySpace, id: u32, device: u32, core: u32) -> BufferKey {
    BufferKey { space, id, device, core }
}

#[test]
fn ids_count_from_100_per_device_and_core() {
    let mem = table(2, 2, OobReads::Raise, FillMode::Nan);
    let alloc = |d, c| mem.allocate(d, c, BufferSpec::new(VMEM, DType::I32, &[2])).unwrap();
    assert_eq!(alloc(0, Some(0)), 100);
    assert_eq!(alloc(0, Some(0)), 101);
    assert_eq!(alloc(0, Some(1)), 100);
    assert_eq!(alloc(1, Some(0)), 100);
    assert_eq!(alloc(0, Some(1)), 101);
    // All cores of device 0 are at 102 now: an all-core allocation agrees.
    assert_eq!(alloc(0, None), 102);
    assert_eq!(alloc(0, Some(1)), 103);
    // Device 1: core 0 at 101, core 1 at 100 -> out of sync is an internal error.
    let e = mem.allocate(1, None, BufferSpec::new(VMEM, DType::I32, &[2])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    // ...and consumed no ids.
    assert_eq!(alloc(1, Some(1)), 100);
    assert_eq!(alloc(1, None), 101);
}

#[test]
fn all_core_allocation_makes_one_private_buffer_per_core() {
    let mem = table(1, 3, OobReads::Raise, FillMode::Zero);
    let id = mem
        .allocate(0, None, BufferSpec { init: Init::Bytes(&[1, 2, 3, 4]), ..BufferSpec::new(VMEM, DType::U8, &[4]) })
        .unwrap();
    mem.store(MemRef::new(0, 1, VMEM, id, &Region::full()), &[9; 4]).unwrap();
    for core in 0..3 {
        let info = mem.info(key(VMEM, id, 0, core)).unwrap();
        assert_eq!(info.ref_count, 1);
        let want = if core == 1 { vec![9; 4] } else { vec![1, 2, 3, 4] };
        assert_eq!(mem.content(key(VMEM, id, 0, core)).unwrap(), want);
    }
    mem.free(0, 1, VMEM, id).unwrap();
    assert!(mem.info(key(VMEM, id, 0, 1)).is_err());
    assert!(mem.info(key(VMEM, id, 0, 0)).is_ok());
}

#[test]
fn hbm_is_shared_by_cores_and_ref_counted() {
    for space in [MemorySpace::Hbm, MemorySpace::Any] {
        let mem = table(2, 2, OobReads::Raise, FillMode::Zero);
        let id = mem.allocate(1, None, BufferSpec::new(space, DType::I16, &[3])).unwrap();
        assert_eq!(mem.info(key(space, id, 1, 0)).unwrap().ref_count, 2);
        assert!(mem.info(key(space, id, 1, 1)).is_err(), "HBM is keyed with core 0");
        // A store from core 1 is seen by core 0.
        mem.store(MemRef::new(1, 1, space, id, &Region::full()), &[5, 0, 6, 0, 7, 0]).unwrap();
        let mut out = [0u8; 6];
        mem.load(MemRef::new(1, 0, space, id, &Region::full()), &mut out).unwrap();
        assert_eq!(out, [5, 0, 6, 0, 7, 0]);
        mem.free(1, 1, space, id).unwrap();
        assert_eq!(mem.info(key(space, id, 1, 0)).unwrap().ref_count, 1);
        mem.free(1, 0, space, id).unwrap();
        let e = mem.info(key(space, id, 1, 0)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value);
        let e = mem.free(1, 0, space, id).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Value);
        assert!(e.message.contains(&format!("{} buffer {id} of device 1, core 0", space.name())), "{e}");
    }
}

#[test]
fn per_core_hbm_allocations_share_one_buffer() {
    // Each core's thread allocates "its" HBM buffer; ids agree, one buffer exists.
    let mem = table(1, 2, OobReads::Raise, FillMode::Zero);
    let a = mem
        .allocate(0, Some(0), BufferSpec { init: Init::Bytes(&[1, 2]), ..BufferSpec::new(HBM, DType::U8, &[2]) })
        .unwrap();
    let b = mem
        .allocate(0, Some(1), BufferSpec { init: Init::Bytes(&[3, 4]), ..BufferSpec::new(HBM, DType::U8, &[2]) })
        .unwrap();
    assert_eq!(a, b);
    let info = mem.info(key(HBM, a, 0, 0)).unwrap();
    assert_eq!(info.ref_count, 2);
    assert_eq!(mem.content(key(HBM, a, 0, 0)).unwrap(), [1, 2], "the first allocation wins");
}

#[test]
fn invalid_allocations_are_value_errors() {
    let mem = table(1, 2, OobReads::Raise, FillMode::Nan);
    let e = mem
        .allocate(0, None, BufferSpec { logical_shape: Some(&[8, 128]), ..BufferSpec::new(VMEM, DType::F32, &[8, 64]) })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert_eq!(e.message, "Logical shape (8, 128) cannot be bigger than content shape (8, 64).");
    let e = mem
        .allocate(0, None, BufferSpec { logical_shape: Some(&[8]), ..BufferSpec::new(VMEM, DType::F32, &[8, 64]) })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    let e = mem
        .allocate(0, None, BufferSpec { init: Init::Bytes(&[0; 12]), ..BufferSpec::new(VMEM, DType::F32, &[4]) })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("must have 16 bytes, got 12"), "{e}");
    let e = mem.allocate(1, None, BufferSpec::new(VMEM, DType::F32, &[4])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    let e = mem.allocate(0, Some(2), BufferSpec::new(VMEM, DType::F32, &[4])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    let e = mem.allocate(0, Some(0), BufferSpec::new(VMEM, DType::F64, &[1 << 40, 1 << 40])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value, "{e}");
    let e = mem.free(0, 0, VMEM, 100).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("vmem buffer 100 of device 0, core 0"), "{e}");
    let mut out = [0u8; 4];
    let e = mem.load(MemRef::new(0, 0, VMEM, 7, &Region::full()), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
}

#[test]
fn fresh_memory_holds_the_fill_value() {
    for fill in [FillMode::Nan, FillMode::Zero] {
        let mem = table(1, 1, OobReads::Raise, fill);
        for dtype in DType::ALL {
            let id = mem.allocate(0, Some(0), BufferSpec::new(VMEM, dtype, &[3, 2])).unwrap();
            let want: Vec<u8> = fill.bytes_of(dtype).repeat(6);
            assert_eq!(mem.content(key(VMEM, id, 0, 0)).unwrap(), want, "{dtype:?} {fill:?}");
        }
    }
}

#[test]
fn init_goes_to_the_logical_corner_and_padding_gets_fill() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
    let init: Vec<u8> = (1..=6).collect(); // logical (2, 3) of int8
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec {
                logical_shape: Some(&[2, 3]),
                init: Init::Bytes(&init),
                ..BufferSpec::new(VMEM, DType::I8, &[3, 4])
            },
        )
        .unwrap();
    let f = 0x7f;
    assert_eq!(mem.content(key(VMEM, id, 0, 0)).unwrap(), [1, 2, 3, f, 4, 5, 6, f, f, f, f, f]);
    let info = mem.info(key(VMEM, id, 0, 0)).unwrap();
    assert_eq!((info.shape, info.logical_shape), (vec![3, 4], vec![2, 3]));
    // The default region is the logical shape.
    assert_eq!(mem.region_shape(key(VMEM, id, 0, 0), &Region::full()).unwrap(), [2, 3]);
    let r = Region::new(vec![DimSel::index(1)]);
    assert_eq!(mem.region_shape(key(VMEM, id, 0, 0), &r).unwrap(), [3]);
    let mut out = [0u8; 6];
    mem.load(MemRef::new(0, 0, VMEM, id, &Region::full()), &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4, 5, 6]);
    // Reading the padding is in bounds of the allocation: it returns fill values.
    let pad = Region::new(vec![DimSel::slice(2, 1, 1), DimSel::slice(0, 4, 1)]);
    let mut out = [0u8; 4];
    mem.load(MemRef::new(0, 0, VMEM, id, &pad), &mut out).unwrap();
    assert_eq!(out, [f; 4]);
    // Writing over the padding is allowed, but only the logical part changes.
    let all = Region::new(vec![DimSel::slice(0, 3, 1), DimSel::slice(0, 4, 1)]);
    mem.store(MemRef::new(0, 0, VMEM, id, &all), &[0; 12]).unwrap();
    assert_eq!(mem.content(key(VMEM, id, 0, 0)).unwrap(), [0, 0, 0, f, 0, 0, 0, f, f, f, f, f]);
}

#[test]
fn every_dtype_round_trips() {
    let mut rng = Rng::new(11);
    let mem = table(1, 1, OobReads::Raise, FillMode::Nan);
    for dtype in DType::ALL {
        let n = 5 * 7 * dtype.itemsize();
        let init = rng.bytes(n);
        let id = mem
            .allocate(0, Some(0), BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(VMEM, dtype, &[5, 7]) })
            .unwrap();
        let mut out = vec![0u8; n];
        mem.load(MemRef::new(0, 0, VMEM, id, &Region::full()), &mut out).unwrap();
        assert_eq!(out, init, "{dtype:?}");
        let data = rng.bytes(n);
        mem.store(MemRef::new(0, 0, VMEM, id, &Region::full()), &data).unwrap();
        mem.load(MemRef::new(0, 0, VMEM, id, &Region::full()), &mut out).unwrap();
        assert_eq!(out, data, "{dtype:?}");
        // A strided column, element by element.
        let col = Region::new(vec![DimSel::slice(1, 2, 2), DimSel::index(3)]);
        let mut two = vec![0u8; 2 * dtype.itemsize()];
        mem.load(MemRef::new(0, 0, VMEM, id, &col), &mut two).unwrap();
        let s = dtype.itemsize();
        let at = |r: usize| (r * 7 + 3) * s;
        assert_eq!(two, [&data[at(1)..at(1) + s], &data[at(3)..at(3) + s]].concat(), "{dtype:?}");
    }
}

#[test]
fn scalars_have_rank_zero() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&[7, 0, 0, 0]), ..BufferSpec::new(MemorySpace::Smem, DType::I32, &[]) },
        )
        .unwrap();
    let mut out = [0u8; 4];
    mem.load(MemRef::new(0, 0, MemorySpace::Smem, id, &Region::full()), &mut out).unwrap();
    assert_eq!(out, [7, 0, 0, 0]);
    mem.store(MemRef::new(0, 0, MemorySpace::Smem, id, &Region::full()), &[1, 2, 3, 4]).unwrap();
    assert_eq!(mem.content(key(MemorySpace::Smem, id, 0, 0)).unwrap(), [1, 2, 3, 4]);
    let e =
        mem.load(MemRef::new(0, 0, MemorySpace::Smem, id, &Region::new(vec![DimSel::index(0)])), &mut out).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
}
