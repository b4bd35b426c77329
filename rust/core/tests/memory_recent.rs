//! The buffer table's per-thread lookup cache never outlives what it
//! caches: a freed buffer is gone for the thread that looked it up, a new
//! table's buffer of the same key is that table's, and a removal on another
//! thread is seen once that thread's work is ordered before the lookup.

mod memory_support;

use memory_support::*;
use mosaic_rt_core::{BufferSpec, DType, FillMode, Init, MemRef, MemorySpace, OobReads, Region};

const VMEM: MemorySpace = MemorySpace::Vmem;

fn vmem_with(mem: &mosaic_rt_core::internals::MemoryTable, byte: u8) -> u32 {
    let bytes = [byte; 16];
    let spec = BufferSpec { init: Init::Bytes(&bytes), ..BufferSpec::new(VMEM, DType::U8, &[16]) };
    mem.allocate(0, Some(0), spec).unwrap()
}

fn first_byte(mem: &mosaic_rt_core::internals::MemoryTable, id: u32) -> mosaic_rt_core::Result<u8> {
    let mut out = [0u8; 16];
    mem.load(MemRef::new(0, 0, VMEM, id, &Region::full()), &mut out)?;
    Ok(out[0])
}

#[test]
fn a_freed_buffer_is_not_found_by_the_thread_that_looked_it_up() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id = vmem_with(&mem, 7);
    assert_eq!(first_byte(&mem, id).unwrap(), 7);
    assert_eq!(first_byte(&mem, id).unwrap(), 7, "a cached lookup");
    mem.free(0, 0, VMEM, id).unwrap();
    assert!(first_byte(&mem, id).is_err(), "freed");
}

#[test]
fn another_tables_buffer_of_the_same_key_is_its_own() {
    let a = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id = vmem_with(&a, 1);
    assert_eq!(first_byte(&a, id).unwrap(), 1);
    let b = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id_b = vmem_with(&b, 2);
    assert_eq!(id, id_b, "the same key in both tables");
    assert_eq!(first_byte(&b, id).unwrap(), 2);
    assert_eq!(first_byte(&a, id).unwrap(), 1);
    drop(a);
    let c = table(1, 1, OobReads::Raise, FillMode::Zero);
    assert!(first_byte(&c, id).is_err(), "no buffer in a new table");
}

#[test]
fn a_free_on_another_thread_is_seen_after_joining_it() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let id = vmem_with(&mem, 3);
    assert_eq!(first_byte(&mem, id).unwrap(), 3);
    std::thread::scope(|s| {
        s.spawn(|| mem.free(0, 0, VMEM, id).unwrap());
    });
    assert!(first_byte(&mem, id).is_err());
    let again = vmem_with(&mem, 4);
    assert_ne!(again, id, "ids are not reused");
    assert_eq!(first_byte(&mem, again).unwrap(), 4);
}
