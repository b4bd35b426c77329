//! Launch registry: lets every device of one kernel launch find the same
//! runtime instance.
//!
//! Each device's program of a launch calls `join(uid, run_id, device)`; the
//! k-th join by a device of (uid, run_id) joins instance k of that pair, so
//! repeated launches of the same kernel (same uid and run id) pair up in
//! order. An instance is removed once each of its devices has left or
//! abandoned it. Failed instances whose devices never all come back are
//! evicted (oldest first) beyond a cap, so they cannot pile up.
//!
//! Launches spanning processes get their frames from the progress engine
//! (`remote::progress`), told here when such a launch begins and ends.

use crate::config::Config;
use crate::error::{Result, RtError};
use crate::remote::progress::{Launches, Progress};
use crate::remote::wire::{GlobalKey, Msg};
use crate::remote::{Link, Transport};
use crate::runtime::Runtime;
use crate::sync::{lock, Arc, AtomicU64, IgnorePoison, Mutex, Ordering, RwLock};
use std::collections::{HashMap, VecDeque};

/// Failed instances kept waiting for their remaining devices.
pub const MAX_FAILED_INSTANCES: usize = 64;

/// Root causes of failed launches kept after their runtime is freed, so a
/// late op of such a launch reports the root cause, not an unknown handle.
pub const MAX_TOMBSTONES: usize = 256;

type LaunchKey = (u64, i64);

struct Instance {
    launch: LaunchKey,
    occurrence: u64,
    config: Config,
    runtime: Arc<Runtime>,
    /// Per device: has it left or abandoned?
    gone: Vec<bool>,
    failed: bool,
    /// A launch spanning processes: its key there, and whether this
    /// process told the others it left.
    global: Option<GlobalKey>,
    told_left: bool,
}

impl Instance {
    /// Every device owned here has left or abandoned the launch.
    fn local_done(&self) -> bool {
        let link = self.runtime.link();
        self.gone.iter().enumerate().all(|(d, &g)| g || link.is_some_and(|l| l.is_remote(d as u32)))
    }
}

#[derive(Default)]
struct Launch {
    /// Joins so far, per device.
    joins: HashMap<u32, u64>,
    /// Live instances by occurrence number.
    instances: HashMap<u64, u64>,
}

#[derive(Default)]
struct Tables {
    instances: HashMap<u64, Instance>,
    launches: HashMap<LaunchKey, Launch>,
    /// Failed instances, oldest first.
    failed: VecDeque<u64>,
}

pub struct LaunchRegistry {
    next_handle: AtomicU64,
    tables: Mutex<Tables>,
    /// handle -> runtime, read on every FFI call that is not cached.
    runtimes: RwLock<HashMap<u64, Arc<Runtime>>>,
    /// (handle, root cause) of freed failed launches, oldest first.
    tombstones: Mutex<VecDeque<(u64, RtError)>>,
    /// Frames from the other processes of a multi-process job (their
    /// routes are taken inside `tables`' lock, never the other way round).
    progress: Progress,
}

impl Default for LaunchRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl LaunchRegistry {
    pub fn new() -> Self {
        LaunchRegistry {
            next_handle: AtomicU64::new(1),
            tables: Mutex::new(Tables::default()),
            runtimes: RwLock::new(HashMap::new()),
            tombstones: Mutex::new(VecDeque::new()),
            progress: Progress::new(),
        }
    }

    /// The root cause of launch `handle` if it failed and has been freed
    /// (or evicted) since.
    pub fn tombstone(&self, handle: u64) -> Option<RtError> {
        lock(&self.tombstones).iter().rev().find(|(h, _)| *h == handle).map(|(_, e)| e.clone())
    }

    /// Joins (creating if first) the instance of this device's next launch of
    /// (uid, run_id); returns its handle (non-zero, never reused) and runtime.
    pub fn join(&self, uid: u64, run_id: i64, device: u32, config: &Config) -> Result<(u64, Arc<Runtime>)> {
        config.validate()?;
        config.topology().check_device(device)?;
        let mut t = lock(&self.tables);
        let global = self.progress.next_key(uid, config, device)?;
        let launch = t.launches.entry((uid, run_id)).or_default();
        let occurrence = launch.joins.get(&device).copied().unwrap_or(0);
        if let Some(&handle) = launch.instances.get(&occurrence) {
            let inst = &t.instances[&handle];
            check_same_config(&inst.config, config, uid, run_id)?;
            if inst.global != global {
                return Err(RtError::internal(format!(
                    "device {device} joined launch {global:?} of kernel {uid} but its other devices here joined                      {:?}: the devices of this process launch kernels in different orders",
                    inst.global
                )));
            }
            let runtime = Arc::clone(&inst.runtime);
            bump_joins(&mut t, (uid, run_id), device);
            runtime.join_device(device)?;
            return Ok((handle, runtime));
        }
        let runtime = Arc::new(match (global, config.owners.clone(), self.progress.node()) {
            (Some(key), Some(owners), Some(node)) => {
                Runtime::new_linked(config.clone(), Link::new(std::sync::Arc::clone(node), key, owners))?
            }
            (None, Some(owners), None) if owners.iter().any(|&p| p != owners[0]) => {
                let mine = owners.get(device as usize).copied();
                let local: Vec<bool> = owners.iter().map(|&p| Some(p) == mine).collect();
                Runtime::new_isolated(config.clone(), &local)?
            }
            _ => Runtime::new_launch(config.clone())?,
        });
        runtime.join_device(device)?;
        #[cfg(not(loom))]
        runtime.watch();
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        launch.instances.insert(occurrence, handle);
        bump_joins(&mut t, (uid, run_id), device);
        t.instances.insert(
            handle,
            Instance {
                launch: (uid, run_id),
                occurrence,
                config: config.clone(),
                runtime: Arc::clone(&runtime),
                gone: vec![false; config.num_devices as usize],
                failed: false,
                global,
                told_left: false,
            },
        );
        if let Some(key) = global {
            self.progress.begin(key, handle, &runtime);
        }
        self.runtimes.write().ignore_poison().insert(handle, Arc::clone(&runtime));
        Ok((handle, runtime))
    }

    pub fn get(&self, handle: u64) -> Option<Arc<Runtime>> {
        self.runtimes.read().ignore_poison().get(&handle).cloned()
    }

    /// The device finished its program normally.
    pub fn leave(&self, handle: u64, device: u32) {
        self.depart(handle, device, false);
    }

    /// The device's program died (a handler errored): counts like `leave`
    /// for teardown, and marks the instance failed.
    pub fn abandon(&self, handle: u64, device: u32) {
        self.depart(handle, device, true);
    }

    /// Live instances.
    pub fn len(&self) -> usize {
        lock(&self.tables).instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (uid, run_id) pairs with a join counter (pruned with their instances).
    pub fn launches_tracked(&self) -> usize {
        lock(&self.tables).launches.len()
    }

    fn depart(&self, handle: u64, device: u32, abandoned: bool) {
        // Outside the tables' lock: leaving may complete a deadlock, which
        // fails the launch and wakes its waiters.
        if let Some(rt) = self.get(handle) {
            let _ = rt.leave_device(device);
        }
        let mut t = lock(&self.tables);
        // Unknown handles were evicted already; nothing to do.
        let Some(inst) = t.instances.get_mut(&handle) else { return };
        if let Some(gone) = inst.gone.get_mut(device as usize) {
            *gone = true;
        }
        let newly_failed = !inst.failed && (abandoned || inst.runtime.failure().is_some());
        inst.failed |= newly_failed;
        if inst.local_done() {
            if let Some(link) = inst.runtime.link() {
                // The launch lives on until every process has left: a late
                // read of this process's memory must still be served.
                if !inst.told_left {
                    inst.told_left = true;
                    let _ = link.broadcast(&Msg::Left);
                }
                if !link.all_peers_left() {
                    return;
                }
            }
            self.remove(&mut t, handle);
            return;
        }
        if newly_failed {
            t.failed.push_back(handle);
            while t.failed.len() > MAX_FAILED_INSTANCES {
                let oldest = t.failed.pop_front().unwrap();
                self.remove(&mut t, oldest);
            }
        }
    }

    fn remove(&self, t: &mut Tables, handle: u64) {
        let Some(inst) = t.instances.remove(&handle) else { return };
        if let Some(root) = inst.runtime.failure() {
            let mut tomb = lock(&self.tombstones);
            tomb.push_back((handle, root));
            while tomb.len() > MAX_TOMBSTONES {
                tomb.pop_front();
            }
        }
        self.runtimes.write().ignore_poison().remove(&handle);
        t.failed.retain(|&h| h != handle);
        if let Some(key) = inst.global {
            self.progress.end(key);
        }
        if let Some(launch) = t.launches.get_mut(&inst.launch) {
            launch.instances.remove(&inst.occurrence);
            // With no live instance left, counting restarts at 0 for everyone.
            if launch.instances.is_empty() {
                t.launches.remove(&inst.launch);
            }
        }
    }
}

impl LaunchRegistry {
    /// Attaches this process to a multi-process job: launches whose devices
    /// other processes own reach them through `transport`, whose frames a
    /// progress thread delivers from now on (`remote::progress`).
    pub fn attach(&'static self, transport: Box<dyn Transport>) -> Result<()> {
        self.progress.attach(transport, self)
    }

    /// Stops the transport for good (the process is exiting).
    pub fn detach(&self) {
        self.progress.detach()
    }

    /// This process's index in its job, once attached.
    pub fn process(&self) -> Option<u32> {
        self.progress.process()
    }
}

impl Launches for LaunchRegistry {
    fn peer_left(&self, handle: u64, from: u32) {
        let mut t = lock(&self.tables);
        let done = match t.instances.get(&handle) {
            Some(inst) => inst.runtime.link().is_some_and(|l| l.peer_left(from)) && inst.local_done(),
            None => false,
        };
        if done {
            self.remove(&mut t, handle);
        }
    }
}

fn bump_joins(t: &mut Tables, launch: LaunchKey, device: u32) {
    if let Some(l) = t.launches.get_mut(&launch) {
        *l.joins.entry(device).or_insert(0) += 1;
    }
}

fn check_same_config(a: &Config, b: &Config, uid: u64, run_id: i64) -> Result<()> {
    let differ = |field: &str, x: String, y: String| {
        Err(RtError::value(format!(
            "devices of one launch (kernel {uid}, run {run_id}) disagree on {field}: {x} vs {y}"
        )))
    };
    if a.num_devices != b.num_devices {
        return differ("num_devices", a.num_devices.to_string(), b.num_devices.to_string());
    }
    if a.cores_per_device != b.cores_per_device {
        return differ("cores_per_device", a.cores_per_device.to_string(), b.cores_per_device.to_string());
    }
    if a.dma_mode != b.dma_mode {
        return differ("dma_mode", format!("{:?}", a.dma_mode), format!("{:?}", b.dma_mode));
    }
    if a.oob_reads != b.oob_reads {
        return differ("oob_reads", format!("{:?}", a.oob_reads), format!("{:?}", b.oob_reads));
    }
    if a.fill != b.fill {
        return differ("fill", format!("{:?}", a.fill), format!("{:?}", b.fill));
    }
    if a.owners != b.owners {
        return differ("the process of each device", format!("{:?}", a.owners), format!("{:?}", b.owners));
    }
    if a.wait_timeout != b.wait_timeout {
        return differ("wait_timeout", format!("{:?}", a.wait_timeout), format!("{:?}", b.wait_timeout));
    }
    Ok(())
}
