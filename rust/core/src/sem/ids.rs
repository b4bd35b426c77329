//! The two semaphore id namespaces: internal ids (scratch / run_scoped
//! semaphores, counted per global core from 2000) and fixed ids (barrier
//! semaphores keyed by collective id).
//!
//! Internal ids always form one run `[2000, end)`: every allocation takes
//! the ids `[first, first + count)` from its cores' counters, reusing the
//! ids another core created already and creating the rest as one
//! [`SemBlock`]. A block stores its counters densely and lazily (see
//! `counters`), so a huge semaphore array costs almost nothing until used.
//!
//! Lookups take only a read lock on the table (a binary search over the
//! blocks), so signals and waits from many cores never serialise on a
//! global mutex.

use super::counters::Counters;
use super::task_queue::TaskQueue;
use super::{Queued, SemKind};
use crate::config::Topology;
use crate::error::{Result, RtError};
use crate::site::SiteId;
use crate::sync::{lock, Arc, AtomicI64, AtomicUsize, IgnorePoison, Mutex, Ordering, RwLock};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// First internal semaphore id on every core (as stock).
pub(crate) const FIRST_INTERNAL_ID: u32 = 2000;

/// Semaphore ids travel through kernels as int32.
pub(crate) const MAX_ID: u32 = i32::MAX as u32;

/// At most this many counters (semaphores x global cores) per allocation,
/// so that one allocation's page table stays within 1 GiB of address space.
pub(crate) const MAX_COUNTERS: u64 = 1 << 36;

/// Consecutive semaphore ids created by one allocation (or one fixed id).
pub(crate) struct SemBlock<T> {
    pub first: u32,
    pub len: u32,
    pub kind: SemKind,
    /// Who created it, for collision reports.
    pub owner: String,
    /// Counter of semaphore `first + off` on global core `g` at `g * len + off`.
    counters: Counters,
    /// Queued DMA work that will signal a semaphore, keyed by
    /// `task_key(off, global core)`; entries stay once created (their storage is
    /// reused by the next DMA).
    tasks: Mutex<HashMap<u64, TaskQueue<T>, BuildHasherDefault<IdHasher>>>,
    /// Capacity `tasks` gets at its first push (one allocation instead of
    /// several doublings: blocks are made anew by every launch).
    tasks_hint: usize,
    /// Number of queued tasks, so waiters skip the mutex when there are none.
    queued: AtomicUsize,
    /// Where it was allocated (0: unknown).
    pub site: SiteId,
    /// (offset, core, value, site) of misuse already reported.
    misuse: Mutex<Vec<(u32, u32, i64, SiteId)>>,
    /// Misuse reports held back until the kernel's end: (offset, core,
    /// report), issued only if that semaphore leaks (see `misuse`).
    suspects: Mutex<Vec<(u32, u32, crate::reports::Report)>>,
}

impl<T: Queued> SemBlock<T> {
    fn new(first: u32, len: u32, kind: SemKind, owner: String, num_cores: u32) -> Result<Self> {
        let n = u64::from(len) * u64::from(num_cores);
        if n > MAX_COUNTERS {
            return Err(RtError::value(format!(
                "cannot allocate {len} semaphores: {len} semaphores x {num_cores} cores is {n} \
                 counters, more than the limit of {MAX_COUNTERS}"
            )));
        }
        let counters = usize::try_from(n)
            .map_err(|_| RtError::memory(format!("cannot allocate {n} semaphore counters")))
            .and_then(Counters::new)
            .map_err(|e| {
                RtError::new(e.kind, format!("cannot allocate {len} semaphores ({n} counters): {}", e.message))
            })?;
        Ok(SemBlock {
            first,
            len,
            kind,
            owner,
            counters,
            tasks: Mutex::new(HashMap::default()),
            tasks_hint: usize::try_from(n).unwrap_or(usize::MAX).min(64),
            queued: AtomicUsize::new(0),
            site: crate::site::current(),
            misuse: Mutex::new(Vec::new()),
            suspects: Mutex::new(Vec::new()),
        })
    }

    #[inline]
    fn index(&self, off: u32, gcore: u32) -> usize {
        gcore as usize * self.len as usize + off as usize
    }

    /// The counter of semaphore `first + off` on global core `gcore`.
    #[inline]
    pub fn counter(&self, off: u32, gcore: u32) -> Result<&AtomicI64> {
        self.counters.get(self.index(off, gcore))
    }

    /// The counter if its storage exists already (the hot path: no error
    /// value to build or move).
    #[inline]
    pub fn counter_if_present(&self, off: u32, gcore: u32) -> Option<&AtomicI64> {
        self.counters.get_if_present(self.index(off, gcore))
    }

    /// Its current count, without materialising storage.
    #[inline]
    pub fn peek(&self, off: u32, gcore: u32) -> i64 {
        self.counters.peek(self.index(off, gcore))
    }

    pub fn push_task(&self, off: u32, gcore: u32, task: T) {
        let mut tasks = lock(&self.tasks);
        if tasks.capacity() == 0 {
            tasks.reserve(self.tasks_hint);
        }
        tasks.entry(task_key(off, gcore)).or_default().push(task);
        drop(tasks);
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// The most recently queued task for (off, gcore) (stock pops from the end).
    pub fn pop_task(&self, off: u32, gcore: u32) -> Option<T> {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let task = lock(&self.tasks).get_mut(&task_key(off, gcore))?.pop()?;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        Some(task)
    }

    pub fn has_task(&self, off: u32, gcore: u32) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
            && lock(&self.tasks).get(&task_key(off, gcore)).is_some_and(|q| !q.is_empty())
    }

    /// Calls `f(off, gcore, count)` for every non-zero counter.
    pub fn for_each_nonzero(&self, mut f: impl FnMut(u32, u32, i64)) {
        let len = self.len as usize;
        self.counters.for_each_nonzero(|i, v| f((i % len) as u32, (i / len) as u32, v));
    }

    /// (bytes, start site) of the DMA steps queued on (off, gcore).
    pub fn pending_bytes(&self, off: u32, gcore: u32) -> Vec<(i64, SiteId)> {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        let tasks = lock(&self.tasks);
        let Some(q) = tasks.get(&task_key(off, gcore)) else { return Vec::new() };
        q.iter().filter_map(|t| Some((t.bytes()?, t.site()))).collect()
    }

    /// Records a misuse report for (off, gcore, value, site); false if it
    /// was reported already (at most 64 per semaphore block).
    pub fn note_misuse(&self, off: u32, gcore: u32, value: i64, site: SiteId) -> bool {
        let mut seen = lock(&self.misuse);
        let key = (off, gcore, value, site);
        if seen.contains(&key) || seen.len() >= 64 {
            return false;
        }
        seen.push(key);
        true
    }

    /// Holds `report` back until the kernel's end (see `take_suspects`).
    pub fn suspect(&self, off: u32, gcore: u32, report: crate::reports::Report) {
        lock(&self.suspects).push((off, gcore, report));
    }

    /// Takes the held-back reports of the global cores `keep` accepts.
    pub fn take_suspects(&self, keep: impl Fn(u32) -> bool) -> Vec<(u32, u32, crate::reports::Report)> {
        let mut all = lock(&self.suspects);
        if all.is_empty() {
            return Vec::new();
        }
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *all).into_iter().partition(|s| keep(s.1));
        *all = kept;
        taken
    }

    /// Descriptions (with start sites) of the queued work that still has
    /// something to do, per (off, gcore), on the global cores `keep` accepts.
    /// Filtering first matters: a device's leak check runs while other
    /// devices' DMAs are still queued, and describing those (string
    /// formatting under the queue lock) would only slow their owners down.
    pub fn pending_work(&self, keep: impl Fn(u32) -> bool) -> Vec<PendingWork> {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        let tasks = lock(&self.tasks);
        tasks
            .iter()
            .filter_map(|(&key, queue)| {
                let (off, g) = ((key >> 32) as u32, key as u32);
                if queue.is_empty() || !keep(g) {
                    return None;
                }
                let pending: Vec<(String, SiteId)> =
                    queue.iter().filter_map(|t| Some((t.pending()?, t.site()))).collect();
                (!pending.is_empty()).then_some((off, g, pending))
            })
            .collect()
    }

    /// Counter pages materialised (memory diagnostics).
    pub fn pages_in_use(&self) -> usize {
        self.counters.pages_in_use()
    }
}

/// (offset, global core, [(description, start site)]) of queued work.
pub(crate) type PendingWork = (u32, u32, Vec<(String, SiteId)>);

/// One semaphore held across a blocking wait (no table lock held).
pub(crate) struct SemRef<T> {
    pub block: Arc<SemBlock<T>>,
    pub off: u32,
}

/// The task-queue key of (offset, global core).
#[inline]
fn task_key(off: u32, gcore: u32) -> u64 {
    (u64::from(off) << 32) | u64::from(gcore)
}

/// A multiplicative hash: keys are small distinct integers, SipHash would
/// only cost time.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

struct SemIdTable<T> {
    /// Internal ids `[FIRST_INTERNAL_ID, end)`, in blocks sorted by first id
    /// that cover the range without gaps.
    blocks: Vec<Arc<SemBlock<T>>>,
    end: u32,
    /// Fixed-id semaphores (one-id blocks).
    fixed: IdMap<Arc<SemBlock<T>>>,
}

impl<T> SemIdTable<T> {
    #[inline]
    fn internal(&self, id: u32) -> Option<(&Arc<SemBlock<T>>, u32)> {
        if !(FIRST_INTERNAL_ID..self.end).contains(&id) {
            return None;
        }
        // blocks[0].first == FIRST_INTERNAL_ID <= id, so the index is >= 1.
        let i = self.blocks.partition_point(|b| b.first <= id) - 1;
        let b = &self.blocks[i];
        Some((b, id - b.first))
    }

    #[inline]
    fn resolve(&self, id: u32) -> Result<(&Arc<SemBlock<T>>, u32)> {
        let fixed = if self.fixed.is_empty() { None } else { self.fixed.get(&id) };
        match (self.internal(id), fixed) {
            (Some(_), Some(_)) => Err(collision_error(id)),
            (Some(found), None) => Ok(found),
            (None, Some(b)) => Ok((b, 0)),
            (None, None) => Err(unknown_error(id)),
        }
    }

    /// The stock lookup message plus a sentence naming both owners.
    fn collision_at_allocation(&self, id: u32) -> Option<RtError> {
        let ((internal, _), fixed) = (self.internal(id)?, self.fixed.get(&id)?);
        Some(RtError::value(format!(
            "Semaphore {id} occurs as both fixed-id and internal. Fixed-id owner: {}; internal \
             owner: {}.",
            fixed.owner, internal.owner
        )))
    }
}

/// Whether fixed id `id` exists too (off the hot path: kernels rarely mix
/// barrier semaphores with internal ids >= 2000).
#[cold]
#[inline(never)]
fn shadowed<T>(table: &SemIdTable<T>, id: u32) -> bool {
    table.fixed.contains_key(&id)
}

fn collision_error(id: u32) -> RtError {
    RtError::value(format!("Semaphore {id} occurs as both fixed-id and internal."))
}

fn unknown_error(id: u32) -> RtError {
    RtError::value(format!("semaphore {id} does not exist: it was never allocated in this kernel"))
}

pub(crate) struct SemIds<T> {
    topo: Topology,
    table: RwLock<SemIdTable<T>>,
    /// Next internal id per global core.
    next: Mutex<Vec<u32>>,
}

impl<T: Queued> SemIds<T> {
    pub fn new(topo: Topology) -> Self {
        SemIds {
            topo,
            table: RwLock::new(SemIdTable { blocks: Vec::new(), end: FIRST_INTERNAL_ID, fixed: IdMap::default() }),
            next: Mutex::new(vec![FIRST_INTERNAL_ID; topo.num_cores() as usize]),
        }
    }

    /// Runs `f(block, offset)` on semaphore `id` under the table's read lock
    /// (no refcount traffic).
    #[inline]
    pub fn with<R>(&self, id: u32, f: impl FnOnce(&SemBlock<T>, u32) -> R) -> Result<R> {
        let table = self.table.read().ignore_poison();
        let (block, off) = table.resolve(id)?;
        Ok(f(block, off))
    }

    /// The hot-path lookup: runs `f(block, offset)` for an internal id that
    /// no fixed id shadows; `None` (also when `f` gives up) sends the caller
    /// to the full, error-reporting path.
    #[inline]
    pub fn with_fast<R>(&self, id: u32, f: impl FnOnce(&SemBlock<T>, u32) -> Option<R>) -> Option<R> {
        let table = self.table.read().ignore_poison();
        let (block, off) = table.internal(id)?;
        if !table.fixed.is_empty() && shadowed(&table, id) {
            return None;
        }
        f(block, off)
    }

    pub fn get(&self, id: u32) -> Result<SemRef<T>> {
        let table = self.table.read().ignore_poison();
        let (block, off) = table.resolve(id)?;
        Ok(SemRef { block: Arc::clone(block), off })
    }

    /// Allocates `count` internal ids on the target cores; see `SemTable::allocate`.
    pub fn allocate_internal(&self, device: u32, core: Option<u32>, kind: SemKind, count: u32) -> Result<u32> {
        let topo = &self.topo;
        // The target cores' global ids (a device's cores are consecutive).
        let cores = match core {
            Some(c) => {
                let g = topo.check(device, c)?;
                g..g + 1
            }
            None => {
                let g = topo.check(device, 0)?;
                g..g + topo.cores_per_device
            }
        };
        let mut next = lock(&self.next);
        let first = next[cores.start as usize];
        if let Some(g) = cores.clone().find(|&g| next[g as usize] != first) {
            return Err(RtError::internal(format!(
                "internal semaphore ids out of sync on device {device}: global core {} would \
                 start at {first}, global core {g} at {}",
                cores.start, next[g as usize]
            )));
        }
        let end = u64::from(first) + u64::from(count);
        if end > u64::from(MAX_ID) + 1 {
            return Err(RtError::value(format!(
                "cannot allocate {count} semaphores on device {device}: their ids would run from \
                 {first} to {}, past the largest semaphore id {MAX_ID} (ids are int32)",
                end - 1
            )));
        }
        let end = end as u32;
        let mut table = self.table.write().ignore_poison();
        // Ids below `table.end` exist already (another core allocated them);
        // the rest become one new block.
        if end > table.end {
            let start = table.end;
            // Built only here: most calls (the other cores) make no block.
            let owner = match core {
                Some(c) => format!("semaphore allocated on device {device}, core {c}"),
                None => format!("semaphore allocated on device {device}, every core"),
            };
            let block = SemBlock::new(start, end - start, kind, owner, self.topo.num_cores())?;
            table.blocks.push(Arc::new(block));
            table.end = end;
        }
        for g in cores {
            next[g as usize] = end;
        }
        // Fixed ids are few: look for one inside [first, end).
        let mut clashes: Vec<u32> = table.fixed.keys().copied().filter(|id| (first..end).contains(id)).collect();
        clashes.sort_unstable();
        match clashes.first().and_then(|&id| table.collision_at_allocation(id)) {
            Some(e) => Err(e),
            None => Ok(first),
        }
    }

    /// Creates fixed-id semaphore `id` on first use and returns `id`.
    pub fn ensure_fixed(&self, id: u32, kind: SemKind, owner: impl FnOnce() -> String) -> Result<u32> {
        {
            let table = self.table.read().ignore_poison();
            if table.fixed.contains_key(&id) {
                return table.resolve(id).map(|_| id);
            }
        }
        let mut table = self.table.write().ignore_poison();
        if let Entry::Vacant(slot) = table.fixed.entry(id) {
            slot.insert(Arc::new(SemBlock::new(id, 1, kind, owner(), self.topo.num_cores())?));
        }
        match table.collision_at_allocation(id) {
            Some(e) => Err(e),
            None => Ok(id),
        }
    }

    /// Every block of both namespaces.
    pub fn all(&self) -> Vec<Arc<SemBlock<T>>> {
        let table = self.table.read().ignore_poison();
        table.blocks.iter().chain(table.fixed.values()).cloned().collect()
    }
}
