//! Launch registry: lets every device of one kernel launch find the same
//! runtime instance.
//!
//! Each device's program of a launch calls `join(uid, run_id, device)`; the
//! k-th join by a device of (uid, run_id) joins instance k of that pair, so
//! repeated launches of the same kernel (same uid and run id) pair up in
//! order. An instance is removed once each of its devices has left or
//! abandoned it. Failed instances whose devices never all come back are
//! evicted (oldest first) beyond a cap, so they cannot pile up.

use crate::config::Config;
use crate::error::{Result, RtError};
use crate::remote::wire::{Envelope, GlobalKey, Incoming, Msg, Status};
use crate::remote::{Link, Node, Transport};
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
    /// Launches spanning processes, by their key there.
    by_global: HashMap<GlobalKey, u64>,
    /// Frames of such launches not begun here yet, in arrival order.
    early: HashMap<GlobalKey, Vec<Envelope>>,
    /// Instances begun with early frames waiting for the progress thread.
    ready: Vec<GlobalKey>,
    /// Joins so far per (uid, device), across runs: the `seq` of a key.
    seqs: HashMap<(u64, u32), u64>,
    /// Keys of launches spanning processes that ended here, recent first.
    ended: VecDeque<GlobalKey>,
}

/// Ended launches remembered (their late frames are dropped).
const MAX_ENDED: usize = 4096;

pub struct LaunchRegistry {
    next_handle: AtomicU64,
    tables: Mutex<Tables>,
    /// handle -> runtime, read on every FFI call that is not cached.
    runtimes: RwLock<HashMap<u64, Arc<Runtime>>>,
    /// (handle, root cause) of freed failed launches, oldest first.
    tombstones: Mutex<VecDeque<(u64, RtError)>>,
    /// This process's end of a multi-process job, once attached.
    node: std::sync::OnceLock<std::sync::Arc<Node>>,
    /// Held by whoever moves frames (the progress thread or a waiter):
    /// one at a time, so frames are applied in arrival order.
    progress_lock: std::sync::Mutex<()>,
    /// A waiter is moving frames (at most one: the others park); the
    /// progress thread stays out of its way meanwhile.
    driving: std::sync::atomic::AtomicBool,
    /// The progress thread, and whether a waiter that parked since wants
    /// it polling busily again (frames it waits for may come any moment).
    progress_thread: std::sync::OnceLock<std::thread::Thread>,
    kicked: std::sync::atomic::AtomicBool,
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
            node: std::sync::OnceLock::new(),
            progress_lock: std::sync::Mutex::new(()),
            driving: std::sync::atomic::AtomicBool::new(false),
            progress_thread: std::sync::OnceLock::new(),
            kicked: std::sync::atomic::AtomicBool::new(false),
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
        let global = match self.spans_processes(config, device)? {
            true => {
                let seq = t.seqs.entry((uid, device)).or_insert(0);
                *seq += 1;
                Some(GlobalKey { uid, seq: *seq - 1 })
            }
            false => None,
        };
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
        let runtime = Arc::new(match (global, config.owners.clone(), self.node.get()) {
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
            t.by_global.insert(key, handle);
            if t.early.contains_key(&key) {
                t.ready.push(key);
            }
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
            t.by_global.remove(&key);
            t.early.remove(&key);
            t.ended.push_front(key);
            t.ended.truncate(MAX_ENDED);
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
    /// progress thread delivers from now on.
    pub fn attach(&'static self, transport: Box<dyn Transport>) -> Result<()> {
        let node = std::sync::Arc::new(Node::new(transport));
        if self.node.set(std::sync::Arc::clone(&node)).is_err() {
            return Err(RtError::value("this process is attached to a multi-process job already"));
        }
        let weak = std::sync::Arc::downgrade(&node);
        node.set_driver(std::sync::Arc::new(move |ready: &dyn Fn() -> bool| match weak.upgrade() {
            Some(node) => self.drive(&node, ready),
            None => false,
        }));
        let thread = std::thread::Builder::new()
            .name("mosaic_rt-progress".into())
            .spawn(move || self.progress(&node))
            .map_err(|e| RtError::internal(format!("cannot start the progress thread: {e}")))?;
        let _ = self.progress_thread.set(thread.thread().clone());
        Ok(())
    }

    /// Stops the transport for good (the process is exiting).
    pub fn detach(&self) {
        if let Some(node) = self.node.get() {
            node.close();
        }
    }

    /// This process's index in its job, once attached.
    pub fn process(&self) -> Option<u32> {
        self.node.get().map(|n| n.process())
    }

    /// Whether a launch of `device` under `config` spans processes (and
    /// can: this process is attached and owns `device`).
    fn spans_processes(&self, config: &Config, device: u32) -> Result<bool> {
        let Some(owners) = &config.owners else { return Ok(false) };
        let Some(first) = owners.first() else { return Ok(false) };
        if owners.iter().all(|p| p == first) {
            return Ok(false);
        }
        // Not attached: the launch runs isolated (only what stays here works).
        let Some(node) = self.node.get() else { return Ok(false) };
        let owner = owners.get(device as usize).copied().unwrap_or(u32::MAX);
        if owner != node.process() {
            return Err(RtError::value(format!(
                "device {device} runs in process {} but the mesh places it in process {owner}",
                node.process()
            )));
        }
        Ok(true)
    }

    /// Runs frames from other processes until the process ends: polls
    /// busily while frames flow, then backs off to sleeping.
    fn progress(&self, node: &Node) {
        let mut idle: u32 = 0;
        loop {
            // A waiter is moving frames: stay off its CPU.
            if self.driving.load(Ordering::Relaxed) {
                std::thread::park_timeout(std::time::Duration::from_micros(50));
                continue;
            }
            if self.kicked.swap(false, Ordering::Relaxed) {
                idle = 0;
            }
            let moved = match self.progress_lock.try_lock() {
                Ok(_guard) => self.move_frames(node),
                Err(_) => 0,
            };
            if moved > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                crate::remote::backoff(idle);
            }
        }
    }

    /// Delivers what arrived; how many frames (call with `progress_lock`).
    fn move_frames(&self, node: &Node) -> usize {
        self.deliver_ready();
        match node.poll() {
            Ok(frames) => {
                let n = frames.len();
                for f in frames {
                    self.deliver(f);
                }
                n
            }
            Err(e) => {
                eprintln!("mosaic_rt: the multi-process transport failed: {}", e.message);
                std::thread::sleep(std::time::Duration::from_millis(100));
                0
            }
        }
    }

    /// A waiter's turn at moving frames (see `remote::Driver`).
    fn drive(&self, node: &Node, ready: &dyn Fn() -> bool) -> bool {
        if self.driving.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let ready_now = {
            // The progress thread holds the lock for one poll at most.
            let _guard = self.progress_lock.lock().ignore_poison();
            let start = std::time::Instant::now();
            loop {
                self.move_frames(node);
                if ready() {
                    break true;
                }
                if start.elapsed() >= crate::remote::DRIVE_BUDGET {
                    break false;
                }
                std::hint::spin_loop();
            }
        };
        self.driving.store(false, Ordering::Release);
        if !ready_now {
            // This waiter parks now: the progress thread takes over, busily.
            self.kicked.store(true, Ordering::Relaxed);
            if let Some(t) = self.progress_thread.get() {
                t.unpark();
            }
        }
        ready_now
    }

    /// Delivers the early frames of launches begun since.
    fn deliver_ready(&self) {
        let work: Vec<(Arc<Runtime>, u64, Vec<Envelope>)> = {
            let mut t = lock(&self.tables);
            if t.ready.is_empty() {
                return;
            }
            let keys = std::mem::take(&mut t.ready);
            keys.into_iter()
                .filter_map(|k| {
                    let h = *t.by_global.get(&k)?;
                    let frames = t.early.remove(&k)?;
                    Some((Arc::clone(&t.instances.get(&h)?.runtime), h, frames))
                })
                .collect()
        };
        for (rt, handle, frames) in work {
            for f in frames {
                self.apply(&rt, handle, f);
            }
        }
    }

    /// One frame from another process: to its launch, or kept until the
    /// launch begins here.
    pub fn deliver(&self, bytes: crate::remote::Payload) {
        let frame = match crate::remote::wire::decode_incoming(bytes) {
            Ok(Incoming::Whole(f)) => f,
            Ok(Incoming::DataFollows { envelope, len }) => match self.take_data(envelope, len) {
                Some(f) => f,
                None => return,
            },
            Err(e) => return eprintln!("mosaic_rt: dropped a message from another process: {}", e.message),
        };
        let (rt, handle, early) = {
            let mut t = lock(&self.tables);
            let Some(&handle) = t.by_global.get(&frame.key) else {
                let ended = t.ended.contains(&frame.key);
                drop(t);
                return self.not_here(frame, ended);
            };
            let Some(inst) = t.instances.get(&handle) else { return };
            let rt = Arc::clone(&inst.runtime);
            let early = t.early.remove(&frame.key).unwrap_or_default();
            (rt, handle, early)
        };
        for f in early.into_iter().chain(std::iter::once(frame)) {
            self.apply(&rt, handle, f);
        }
    }

    fn apply(&self, rt: &Runtime, handle: u64, frame: Envelope) {
        if frame.msg == Msg::Left {
            let from = frame.from;
            rt.deliver(frame);
            let mut t = lock(&self.tables);
            let done = match t.instances.get(&handle) {
                Some(inst) => inst.runtime.link().is_some_and(|l| l.peer_left(from)) && inst.local_done(),
                None => false,
            };
            if done {
                self.remove(&mut t, handle);
            }
            return;
        }
        rt.deliver(frame);
    }

    /// The data following an eager DMA's header: landed in place when its
    /// launch runs here with no earlier frame kept for it (arrival order),
    /// else taken into a buffer and returned in the frame, delivered as
    /// any other.
    fn take_data(&self, mut frame: Envelope, len: usize) -> Option<Envelope> {
        let node = self.node.get()?;
        let from = frame.from;
        let rt = {
            let t = lock(&self.tables);
            match t.early.contains_key(&frame.key) {
                true => None,
                false => t.by_global.get(&frame.key).and_then(|h| t.instances.get(h)).map(|i| Arc::clone(&i.runtime)),
            }
        };
        if rt.is_some_and(|rt| rt.deliver_in_place(&frame, len, &mut |into: &mut [u8]| node.receive_data(from, into))) {
            return None;
        }
        let mut data = crate::remote::Payload::for_receive(len);
        if let Err(e) = node.receive_data(from, data.as_mut_slice()) {
            eprintln!("mosaic_rt: the data of a DMA from process {from} was lost: {}", e.message);
            return None;
        }
        if let Msg::DmaEager { data: d, .. } = &mut frame.msg {
            *d = data;
        }
        Some(frame)
    }

    /// A frame of a launch not (or no longer) here: probes are answered,
    /// frames of ended launches dropped, the rest kept for the launch.
    fn not_here(&self, frame: Envelope, ended: bool) {
        if let Msg::Probe { wave } = frame.msg {
            // Frames kept for the launch count as received (they are not
            // in flight), so the others can tell this process never came.
            let received = match ended {
                true => 0,
                false => {
                    lock(&self.tables).early.get(&frame.key).map_or(0, |f| f.iter().filter(|f| f.msg.counted()).count())
                }
            };
            let status = Status {
                joined: ended,
                quiescent: ended,
                left: ended,
                received: received as u64,
                epoch: received as u64,
                ..Status::default()
            };
            if let Some(node) = self.node.get() {
                let _ = node.send(frame.from, frame.key, Msg::Status { wave, status });
            }
            return;
        }
        if !ended {
            lock(&self.tables).early.entry(frame.key).or_default().push(frame);
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
