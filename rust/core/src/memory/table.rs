//! The table of live buffers: one shard per device (a device's cores mostly
//! touch their own shard), each an RwLock'd map so lookups from many core
//! threads proceed in parallel. The table lock is held only to find or
//! insert/remove a buffer, never while copying its bytes.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::buffer::{element_count, Buffer};
use super::message::{no_such_buffer, shape_repr};
use super::plan::RegionPlan;
use super::recent;
use super::{BufferInfo, BufferKey, BufferSpec, Init, MemorySpace};
use crate::config::{Config, FillMode, OobReads, Topology};
use crate::error::{Result, RtError};
use crate::hash::KeyHasher;
use crate::region::Region;
use crate::sync::IgnorePoison;
use mosaic_rt_wire::DType;

/// Buffer ids count from here per (device, core), as in stock.
const FIRST_BUFFER_ID: u32 = 100;

type BufferMap = HashMap<BufferKey, Arc<Buffer>, BuildHasherDefault<KeyHasher>>;

/// Shard generations, unique in the process (see `recent.rs`).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn new_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

struct Shard {
    buffers: RwLock<BufferMap>,
    /// The map's version for the per-thread lookup cache (`recent.rs`):
    /// changed, under the write lock, whenever a buffer is removed (new
    /// keys invalidate nothing a thread remembered).
    generation: AtomicU64,
    /// Next buffer id per local core of this device.
    next_ids: Mutex<Vec<u32>>,
    /// Queued (on_wait) DMAs whose source, on this device, is still to be
    /// read: the only reads of a device's memory that can come after its
    /// program has ended (a DMA's source is always on its own device).
    unread_dmas: AtomicU32,
}

pub struct MemoryTable {
    pub(super) topo: Topology,
    shards: Vec<Shard>,
    pub(crate) oob_reads: OobReads,
    pub(crate) fill: FillMode,
    /// initcheck: kernel-local buffers get a written-elements shadow.
    pub(crate) detect_uninit: bool,
    /// Reports are for Python to issue as warnings (`Config`).
    pub(super) report_as_warnings: bool,
    /// Sites of unchecked out-of-bounds reads already reported (`report_oob_read`).
    oob_read_sites: Mutex<Vec<crate::site::SiteId>>,
}

impl MemoryTable {
    pub fn new(config: &Config) -> Self {
        let shards = (0..config.num_devices)
            .map(|_| Shard {
                buffers: RwLock::new(BufferMap::default()),
                generation: AtomicU64::new(new_generation()),
                next_ids: Mutex::new(vec![FIRST_BUFFER_ID; config.cores_per_device as usize]),
                unread_dmas: AtomicU32::new(0),
            })
            .collect();
        MemoryTable {
            topo: config.topology(),
            shards,
            oob_reads: config.oob_reads,
            fill: config.fill,
            detect_uninit: config.detect_uninitialized,
            report_as_warnings: config.report_as_warnings,
            oob_read_sites: Mutex::new(Vec::new()),
        }
    }

    /// Whether an unchecked out-of-bounds load at `site` is the first one
    /// there (at most 64 sites are reported per launch).
    pub(super) fn note_oob_read(&self, site: crate::site::SiteId) -> bool {
        let mut seen = self.oob_read_sites.lock().ignore_poison();
        if seen.contains(&site) || seen.len() >= 64 {
            return false;
        }
        seen.push(site);
        true
    }

    fn shard(&self, device: u32) -> Result<&Shard> {
        self.topo.check_device(device)?;
        Ok(&self.shards[device as usize])
    }

    /// The buffer of `key`; the shard lock is released before returning.
    pub(crate) fn get(&self, key: BufferKey, action: &str) -> Result<Arc<Buffer>> {
        let shard = self.shard(key.device)?;
        // Acquire: a removal that happened before this lookup (say, before a
        // semaphore signal this thread waited for) is seen.
        if let Some(buf) = recent::find(shard.generation.load(Ordering::Acquire), key) {
            return Ok(buf);
        }
        let map = shard.buffers.read().ignore_poison();
        // Under the read lock the generation is the map's.
        let generation = shard.generation.load(Ordering::Relaxed);
        let buf = map.get(&key).cloned().ok_or_else(|| no_such_buffer(key, action))?;
        drop(map);
        recent::remember(generation, key, &buf);
        Ok(buf)
    }

    pub fn allocate(&self, device: u32, core: Option<u32>, spec: BufferSpec<'_>) -> Result<u32> {
        let BufferSpec { space, dtype, shape, logical_shape, init } = spec;
        let topo = self.topo;
        let cores: Vec<u32> = match core {
            Some(c) => vec![c],
            None => (0..topo.cores_per_device).collect(),
        };
        for &c in &cores {
            topo.check(device, c)?;
        }
        let logical = logical_shape.unwrap_or(shape);
        check_shapes(shape, logical)?;
        let init = match init {
            Init::Fill => None,
            Init::Bytes(bytes) => {
                let want = element_count(logical)?.saturating_mul(dtype.itemsize());
                if bytes.len() != want {
                    return Err(RtError::value(format!(
                        "initial value of a {} buffer of logical shape {} must have {want} bytes, got {}",
                        dtype.name(),
                        shape_repr(logical),
                        bytes.len()
                    )));
                }
                Some(bytes)
            }
        };
        let fill = self.fill.bytes_of(dtype);
        let shard = self.shard(device)?;

        let id = take_id(shard, device, &cores)?;

        if space.is_shared_by_cores() {
            // One buffer per device, referenced by every core.
            let key = BufferKey { space, id, device, core: 0 };
            let exists = shard.buffers.read().ignore_poison().contains_key(&key);
            if !exists {
                let buf = Buffer::new(dtype, shape, logical, &fill, init, topo.cores_per_device, false)?;
                let mut map = shard.buffers.write().ignore_poison();
                map.entry(key).or_insert_with(|| Arc::new(buf));
            }
        } else {
            let mut fresh = Vec::with_capacity(cores.len());
            // initcheck tracks kernel-local memory (HBM/ANY hold inputs and outputs).
            let track = self.detect_uninit;
            for &c in &cores {
                let buf = Buffer::new(dtype, shape, logical, &fill, init, 1, track)?;
                fresh.push((BufferKey { space, id, device, core: c }, Arc::new(buf)));
            }
            let mut map = shard.buffers.write().ignore_poison();
            for (key, buf) in fresh {
                map.entry(key).or_insert(buf);
            }
        }
        Ok(id)
    }

    /// An HBM buffer of `device` (shared by its cores) whose bytes are
    /// `bytes`, borrowed read-only instead of copied: any write fails. Ends
    /// with [`MemoryTable::release_borrowed`].
    ///
    /// # Safety
    /// `bytes` must stay valid and unmodified after this call returns, until
    /// `release_borrowed(device, ..)` has returned or this table is dropped.
    pub unsafe fn allocate_borrowed(&self, device: u32, dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<u32> {
        self.topo.check_device(device)?;
        // SAFETY: `bytes` outlives the buffer's borrow (this fn's contract),
        // which `release_borrowed` ends before the memory may go away.
        let buf = unsafe { Buffer::borrowed(dtype, shape, bytes.as_ptr(), bytes.len(), self.topo.cores_per_device)? };
        self.insert_device_hbm(device, buf)
    }

    /// An HBM output buffer of `device` (shared by its cores) whose bytes
    /// are `len` bytes at `ptr`: XLA's result buffer of the output, written
    /// in place. Holds the fill values until written, or with `holds_value`
    /// the bytes already there (an input aliased to the output). Ends with
    /// [`MemoryTable::finish_direct_outputs`] or `release_borrowed`.
    ///
    /// # Safety
    /// `ptr` must point to `len` writable bytes that nothing else reads or
    /// writes after this call returns, until `finish_direct_outputs` or
    /// `release_borrowed(device, ..)` has returned or this table is dropped.
    pub unsafe fn allocate_direct(
        &self,
        device: u32,
        dtype: DType,
        shape: &[usize],
        ptr: *mut u8,
        len: usize,
        holds_value: bool,
    ) -> Result<u32> {
        self.topo.check_device(device)?;
        let fill = (!holds_value).then(|| self.fill.bytes_of(dtype));
        // SAFETY: the memory is ours until the buffer's borrow ends (this
        // fn's contract), which `finish_direct_outputs` / `release_borrowed`
        // do before XLA may use it again.
        let buf = unsafe { Buffer::direct(dtype, shape, ptr, len, fill.as_deref(), self.topo.cores_per_device)? };
        self.insert_device_hbm(device, buf)
    }

    /// Registers `buf` as a new HBM buffer of `device`, shared by all its
    /// cores (one id, taken on every core).
    fn insert_device_hbm(&self, device: u32, buf: Buffer) -> Result<u32> {
        let cores: Vec<u32> = (0..self.topo.cores_per_device).collect();
        let shard = self.shard(device)?;
        let id = take_id(shard, device, &cores)?;
        let key = BufferKey { space: MemorySpace::Hbm, id, device, core: 0 };
        shard.buffers.write().ignore_poison().insert(key, Arc::new(buf));
        Ok(id)
    }

    /// `device`'s direct output buffers, in allocation order.
    fn direct_outputs(&self, device: u32) -> Vec<(u32, Arc<Buffer>, (usize, usize))> {
        let Ok(shard) = self.shard(device) else { return Vec::new() };
        let map = shard.buffers.read().ignore_poison();
        let mut out: Vec<_> =
            map.iter().filter_map(|(k, b)| b.direct_range().map(|r| (k.id, Arc::clone(b), r))).collect();
        out.sort_by_key(|(id, ..)| *id);
        out
    }

    /// Kernel end of `device`: `results` are the (address, length) of the
    /// XLA buffers `kernel_end` received for its direct outputs, in
    /// allocation order. They must be exactly the memory those outputs have
    /// written (otherwise XLA copied a buffer between the allocation and
    /// kernel end, and the kernel wrote memory XLA may have reused: an
    /// internal error, never a silent wrong result). On a match every
    /// output gets its pending fill values and its borrow ends; on a
    /// mismatch the borrows end without another write.
    pub fn finish_direct_outputs(&self, device: u32, results: &[(usize, usize)]) -> Result<()> {
        let outs = self.direct_outputs(device);
        let registered: Vec<(usize, usize)> = outs.iter().map(|(_, _, r)| *r).collect();
        if registered != results {
            for (_, buf, _) in &outs {
                buf.release_borrowed(false);
            }
            return Err(RtError::internal(format!(
                "kernel_end: device {device} wrote its outputs in place at {} but received the result \
                 buffers {} (XLA copied an output between its allocation and kernel end; please \
                 report this program)",
                ranges_repr(&registered),
                ranges_repr(results)
            )));
        }
        for (_, buf, _) in &outs {
            buf.finish_direct();
        }
        Ok(())
    }

    /// Ends every borrow of `device`'s buffers (see
    /// [`Buffer::release_borrowed`]: `keep` copies the bytes for readers on
    /// other threads). Once this returns nothing refers to borrowed memory
    /// of the device.
    pub fn release_borrowed(&self, device: u32, keep: bool) {
        let Ok(shard) = self.shard(device) else { return };
        // Nothing will read the bytes once no queued DMA of the device is
        // left unread: then dropping them is as good as copying them.
        let keep = keep && shard.unread_dmas.load(Ordering::Acquire) > 0;
        let bufs: Vec<Arc<Buffer>> = shard.buffers.read().ignore_poison().values().cloned().collect();
        for buf in bufs {
            buf.release_borrowed(keep);
        }
    }

    /// A queued DMA will read `device`'s memory later (see `unread_dmas`).
    pub(crate) fn dma_read_queued(&self, device: u32) {
        if let Ok(shard) = self.shard(device) {
            shard.unread_dmas.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A queued DMA of `device` has read its source. Release: a device
    /// leaving that sees the count drop sees the read finished.
    pub(crate) fn dma_read_done(&self, device: u32) {
        if let Ok(shard) = self.shard(device) {
            shard.unread_dmas.fetch_sub(1, Ordering::Release);
        }
    }

    /// The memory `device`'s buffers borrow now, as (address, length).
    pub fn borrowed_ranges(&self, device: u32) -> Vec<(usize, usize)> {
        let Ok(shard) = self.shard(device) else { return Vec::new() };
        let map = shard.buffers.read().ignore_poison();
        map.values().filter_map(|b| b.borrowed_range()).collect()
    }

    /// Whether buffer `key` is borrowed (tests, diagnostics).
    pub fn is_borrowed(&self, key: BufferKey) -> Result<bool> {
        Ok(self.get(key, "inspect")?.is_borrowed())
    }

    pub fn free(&self, device: u32, core: u32, space: MemorySpace, id: u32) -> Result<()> {
        self.topo.check(device, core)?;
        let key = BufferKey::for_access(space, id, device, core);
        let shard = self.shard(device)?;
        let mut map = shard.buffers.write().ignore_poison();
        let buf = map.get(&key).ok_or_else(|| no_such_buffer(key, "free"))?;
        // Only changed under this write lock, so load-then-store is exact.
        let left = buf.ref_count.load(Ordering::Relaxed) - 1;
        buf.ref_count.store(left, Ordering::Relaxed);
        if left == 0 {
            map.remove(&key);
            shard.generation.store(new_generation(), Ordering::Release);
        }
        Ok(())
    }

    pub fn info(&self, key: BufferKey) -> Result<BufferInfo> {
        Ok(self.get(key, "inspect")?.info())
    }

    /// Whether buffer `key` exists now (no error built when it does not).
    pub fn exists(&self, key: BufferKey) -> bool {
        let Ok(shard) = self.shard(key.device) else { return false };
        if recent::find(shard.generation.load(Ordering::Acquire), key).is_some() {
            return true;
        }
        shard.buffers.read().ignore_poison().contains_key(&key)
    }

    pub fn content(&self, key: BufferKey) -> Result<Vec<u8>> {
        Ok(self.get(key, "read")?.read(&key)?.to_vec())
    }

    pub fn region_shape(&self, key: BufferKey, region: &Region) -> Result<Vec<usize>> {
        let buf = self.get(key, "index")?;
        Ok(RegionPlan::new(region, &buf.logical_shape)?.full_shape().to_vec())
    }
}

/// One id for a buffer on each of `cores` of `device`; they must agree
/// (ids are kept in sync).
fn take_id(shard: &Shard, device: u32, cores: &[u32]) -> Result<u32> {
    let mut next = shard.next_ids.lock().ignore_poison();
    let id = next[cores[0] as usize];
    if let Some(&c) = cores.iter().find(|&&c| next[c as usize] != id) {
        return Err(RtError::internal(format!(
            "buffer ids out of sync on device {device}: core {} would get {id}, core {c} would get {}",
            cores[0], next[c as usize]
        )));
    }
    for &c in cores {
        next[c as usize] += 1;
    }
    Ok(id)
}

/// `[addr+len, ...]` for an error message.
fn ranges_repr(ranges: &[(usize, usize)]) -> String {
    let items: Vec<String> = ranges.iter().map(|(at, len)| format!("{at:#x}+{len}")).collect();
    format!("[{}]", items.join(", "))
}

/// Stock's `Buffer` checks: same rank, logical <= allocated per dim.
fn check_shapes(shape: &[usize], logical: &[usize]) -> Result<()> {
    if shape.len() != logical.len() {
        return Err(RtError::value(format!(
            "logical shape {} and content shape {} have different ranks",
            shape_repr(logical),
            shape_repr(shape)
        )));
    }
    if shape.iter().zip(logical).any(|(&s, &l)| l > s) {
        return Err(RtError::value(format!(
            "Logical shape {} cannot be bigger than content shape {}.",
            shape_repr(logical),
            shape_repr(shape)
        )));
    }
    Ok(())
}
