//! The two semaphore id namespaces: internal ids (scratch / run_scoped
//! semaphores, counted per global core from 2000) and fixed ids (barrier
//! semaphores keyed by collective id).
//!
//! Lookups take only a read lock on one table, so signals and waits from
//! many cores never serialise on a global mutex.

use super::{SemKind, Task};
use crate::config::Topology;
use crate::error::{Result, RtError};
use crate::sync::{lock, Arc, AtomicI64, AtomicUsize, Mutex, Ordering, RwLock};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// First internal semaphore id on every core (as stock).
pub(crate) const FIRST_INTERNAL_ID: u32 = 2000;

pub(crate) struct Semaphore {
    pub id: u32,
    pub kind: SemKind,
    /// Who created it, for collision reports.
    pub owner: String,
    /// One counter per global core.
    pub counts: Box<[AtomicI64]>,
    /// Queued DMA work that will signal this semaphore, per global core.
    tasks: Mutex<HashMap<u32, Vec<Task>>>,
    /// Number of queued tasks, so waiters skip the mutex when there are none.
    queued: AtomicUsize,
}

impl Semaphore {
    fn new(id: u32, kind: SemKind, owner: String, num_cores: u32) -> Self {
        Semaphore {
            id,
            kind,
            owner,
            counts: (0..num_cores).map(|_| AtomicI64::new(0)).collect(),
            tasks: Mutex::new(HashMap::new()),
            queued: AtomicUsize::new(0),
        }
    }

    pub fn push_task(&self, gcore: u32, task: Task) {
        lock(&self.tasks).entry(gcore).or_default().push(task);
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// The most recently queued task for `gcore` (stock pops from the end).
    pub fn pop_task(&self, gcore: u32) -> Option<Task> {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut tasks = lock(&self.tasks);
        let task = tasks.get_mut(&gcore)?.pop()?;
        self.queued.fetch_sub(1, Ordering::SeqCst);
        Some(task)
    }

    pub fn has_task(&self, gcore: u32) -> bool {
        self.queued.load(Ordering::SeqCst) > 0 && lock(&self.tasks).get(&gcore).is_some_and(|q| !q.is_empty())
    }
}

/// Identity hash: ids are small distinct integers, SipHash would only cost time.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
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

#[derive(Default)]
struct Entry {
    internal: Option<Arc<Semaphore>>,
    fixed: Option<Arc<Semaphore>>,
}

impl Entry {
    fn resolve(&self, id: u32) -> Result<&Arc<Semaphore>> {
        match (&self.internal, &self.fixed) {
            (Some(_), Some(_)) => Err(collision_error(id)),
            (Some(s), None) | (None, Some(s)) => Ok(s),
            (None, None) => Err(unknown_error(id)),
        }
    }
}

fn collision_error(id: u32) -> RtError {
    RtError::value(format!("Semaphore {id} occurs as both fixed-id and internal."))
}

fn unknown_error(id: u32) -> RtError {
    RtError::value(format!("semaphore {id} does not exist: it was never allocated in this kernel"))
}

pub(crate) struct SemIds {
    num_cores: u32,
    table: RwLock<IdMap<Entry>>,
    /// Next internal id per global core.
    next: Mutex<Vec<u32>>,
}

impl SemIds {
    pub fn new(topo: &Topology) -> Self {
        SemIds {
            num_cores: topo.num_cores(),
            table: RwLock::new(IdMap::default()),
            next: Mutex::new(vec![FIRST_INTERNAL_ID; topo.num_cores() as usize]),
        }
    }

    /// Runs `f` on semaphore `id` under the table's read lock (no refcount traffic).
    pub fn with<R>(&self, id: u32, f: impl FnOnce(&Semaphore) -> R) -> Result<R> {
        let table = read_lock(&self.table);
        let entry = table.get(&id).ok_or_else(|| unknown_error(id))?;
        Ok(f(entry.resolve(id)?))
    }

    pub fn get(&self, id: u32) -> Result<Arc<Semaphore>> {
        let table = read_lock(&self.table);
        let entry = table.get(&id).ok_or_else(|| unknown_error(id))?;
        entry.resolve(id).cloned()
    }

    /// Allocates `count` internal ids on the target cores; see `SemTable::allocate`.
    pub fn allocate_internal(
        &self,
        topo: &Topology,
        device: u32,
        core: Option<u32>,
        kind: SemKind,
        count: u32,
    ) -> Result<u32> {
        let cores: Vec<u32> = match core {
            Some(c) => vec![topo.check(device, c)?],
            None => {
                topo.check(device, 0)?;
                (0..topo.cores_per_device).map(|c| topo.global_core(device, c)).collect()
            }
        };
        let owner = match core {
            Some(c) => format!("semaphore allocated on device {device}, core {c}"),
            None => format!("semaphore allocated on device {device}, every core"),
        };
        let mut next = lock(&self.next);
        let first = next[cores[0] as usize];
        if let Some(&g) = cores.iter().find(|&&g| next[g as usize] != first) {
            return Err(RtError::internal(format!(
                "internal semaphore ids out of sync on device {device}: global core {} would \
                 start at {first}, global core {g} at {}",
                cores[0], next[g as usize]
            )));
        }
        let end = first.checked_add(count).ok_or_else(|| {
            RtError::value(format!("too many semaphores: cannot allocate {count} after id {first}"))
        })?;
        for &g in &cores {
            next[g as usize] = end;
        }
        let mut table = write_lock(&self.table);
        let mut collision = None;
        for id in first..end {
            let entry = table.entry(id).or_default();
            if entry.internal.is_none() {
                entry.internal = Some(Arc::new(Semaphore::new(id, kind, owner.clone(), self.num_cores)));
            }
            if collision.is_none() {
                collision = collision_at_allocation(id, entry);
            }
        }
        match collision {
            Some(e) => Err(e),
            None => Ok(first),
        }
    }

    /// Creates fixed-id semaphore `id` on first use and returns `id`.
    pub fn ensure_fixed(&self, id: u32, kind: SemKind, owner: String) -> Result<u32> {
        {
            let table = read_lock(&self.table);
            if let Some(e) = table.get(&id).filter(|e| e.fixed.is_some()) {
                return e.resolve(id).map(|_| id);
            }
        }
        let mut table = write_lock(&self.table);
        let entry = table.entry(id).or_default();
        if entry.fixed.is_none() {
            entry.fixed = Some(Arc::new(Semaphore::new(id, kind, owner, self.num_cores)));
        }
        match collision_at_allocation(id, entry) {
            Some(e) => Err(e),
            None => Ok(id),
        }
    }

    /// Every semaphore of both namespaces.
    pub fn all(&self) -> Vec<Arc<Semaphore>> {
        let table = read_lock(&self.table);
        table.values().flat_map(|e| e.internal.iter().chain(e.fixed.iter()).cloned()).collect()
    }
}

/// The stock lookup message plus a sentence naming both owners.
fn collision_at_allocation(id: u32, entry: &Entry) -> Option<RtError> {
    let (Some(internal), Some(fixed)) = (&entry.internal, &entry.fixed) else {
        return None;
    };
    Some(RtError::value(format!(
        "Semaphore {id} occurs as both fixed-id and internal. Fixed-id owner: {}; internal \
         owner: {}.",
        fixed.owner, internal.owner
    )))
}

// RwLock poisoning is ignored for the same reason as `sync::lock`.
fn read_lock<T>(l: &RwLock<T>) -> impl std::ops::Deref<Target = T> + '_ {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    l.write().unwrap_or_else(|p| p.into_inner())
}
