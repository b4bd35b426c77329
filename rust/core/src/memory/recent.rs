//! A per-thread cache of the buffer table's last few lookups.
//!
//! Every op looks its buffers up, and the core threads of a device all look
//! up the same few: the shard's read lock is one cache line they all write,
//! bouncing between CPUs (a measurable share of a 32-core SparseCore
//! kernel's time went to `MemoryTable::get`: benches/PERFORMANCE.md, "Memory
//! lookups"). A hit here reads the shard's generation (written
//! only when a buffer is removed) and upgrades a `Weak`.
//!
//! An entry is valid while its shard's generation is the one it was read
//! under: removals give the shard a new generation, unique across every
//! table of the process (`MemoryTable::get`, `free`), so neither a removed
//! buffer nor another table's buffer of the same key is ever returned. The
//! entries are `Weak`: a cached buffer's memory goes when its table drops it.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use super::buffer::Buffer;
use super::BufferKey;

const ENTRIES: usize = 4;

struct CachedLookup {
    generation: u64,
    key: BufferKey,
    buf: Weak<Buffer>,
}

#[derive(Default)]
struct LookupCache {
    entries: [Option<CachedLookup>; ENTRIES],
    next: usize,
}

thread_local! {
    static RECENT: RefCell<LookupCache> = RefCell::new(LookupCache::default());
}

/// The buffer of `key` if this thread looked it up under `generation`.
pub(super) fn find(generation: u64, key: BufferKey) -> Option<Arc<Buffer>> {
    RECENT.with(|r| {
        let r = r.borrow();
        let e = r.entries.iter().flatten().find(|e| e.generation == generation && e.key == key)?;
        e.buf.upgrade()
    })
}

/// Remembers that `key` was `buf` under `generation` (replacing the oldest
/// entry).
pub(super) fn remember(generation: u64, key: BufferKey, buf: &Arc<Buffer>) {
    RECENT.with(|r| {
        let mut r = r.borrow_mut();
        let at = r.next;
        r.entries[at] = Some(CachedLookup { generation, key, buf: Arc::downgrade(buf) });
        r.next = (at + 1) % ENTRIES;
    });
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, FillMode};
    use crate::memory::table::MemoryTable;
    use crate::memory::{BufferKey, BufferSpec, MemorySpace};
    use mosaic_rt_wire::DType;

    #[test]
    fn a_freed_buffer_still_alive_elsewhere_is_not_found() {
        // An in-flight DMA may hold a freed buffer: only the generation
        // tells this thread's cached entry is stale.
        let mem = MemoryTable::new(&Config {
            num_devices: 1,
            cores_per_device: 1,
            fill: FillMode::Zero,
            ..Config::default()
        });
        let id = mem.allocate(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::U8, &[8])).unwrap();
        let key = BufferKey { space: MemorySpace::Vmem, id, device: 0, core: 0 };
        let held = mem.get(key, "read").unwrap();
        assert!(mem.get(key, "read").is_ok(), "cached");
        mem.free(0, 0, MemorySpace::Vmem, id).unwrap();
        assert!(mem.get(key, "read").is_err(), "freed, though still alive in `held`");
        drop(held);
    }
}
