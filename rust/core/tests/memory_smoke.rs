//! Quick end-to-end check of allocate / load / store / free on MemoryTable.

use mosaic_rt_core::internals::MemoryTable;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DimSel, Init, MemorySpace, Region};

#[test]
fn allocate_store_load_free() {
    let config = Config::default();
    let mem = MemoryTable::new(&config);
    let init: Vec<u8> = (0..8u32 * 4).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let id = mem
        .allocate(
            0,
            Some(0),
            BufferSpec { init: Init::Bytes(&init), ..BufferSpec::new(MemorySpace::Vmem, DType::F32, &[8, 4]) },
        )
        .unwrap();
    assert_eq!(id, 100);
    let row = Region::new(vec![DimSel::index(2)]);
    let mut out = [0u8; 16];
    mem.load(MemRef::new(0, 0, MemorySpace::Vmem, id, &row), &mut out).unwrap();
    assert_eq!(out, init[32..48]);
    mem.store(MemRef::new(0, 0, MemorySpace::Vmem, id, &row), &[7u8; 16]).unwrap();
    mem.load(MemRef::new(0, 0, MemorySpace::Vmem, id, &row), &mut out).unwrap();
    assert_eq!(out, [7u8; 16]);
    mem.free(0, 0, MemorySpace::Vmem, id).unwrap();
    assert!(mem.load(MemRef::new(0, 0, MemorySpace::Vmem, id, &row), &mut out).is_err());
}
