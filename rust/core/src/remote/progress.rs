//! The progress engine of a multi-process job: the thread (or a waiter,
//! see [`super::Driver`]) that moves frames from the transport to the
//! launches they belong to, and the frames kept for launches not begun
//! here yet.
//!
//! It knows launches by their key across processes; the launch registry
//! tells it when one begins or ends here (`begin`, `end`) and hears back
//! through [`Launches`] when another process leaves one, so the registry
//! keeps no transport state and this file no handle table.

use super::wire::{decode_incoming, Envelope, GlobalKey, Incoming, Msg, Status};
use super::{backoff, Node, Payload, Transport, DRIVE_BUDGET};
use crate::config::Config;
use crate::error::{Result, RtError};
use crate::runtime::Runtime;
use crate::sync::{lock, Arc, IgnorePoison, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

/// Ended launches remembered (their late frames are dropped).
const MAX_ENDED: usize = 4096;

/// What the engine needs of the launches of this process (the registry).
pub trait Launches: Sync {
    /// Process `from` left launch `handle` (its `Left` frame is applied):
    /// the launch is freed if every process has left it.
    fn peer_left(&self, handle: u64, from: u32);
}

/// Where frames go. Taken inside the registry's lock (join, teardown),
/// never the other way round.
#[derive(Default)]
struct Routes {
    /// Launches spanning processes begun here, by their key there: the
    /// handle and runtime.
    begun: HashMap<GlobalKey, (u64, Arc<Runtime>)>,
    /// Frames of such launches not begun here yet, in arrival order.
    early: HashMap<GlobalKey, Vec<Envelope>>,
    /// Launches begun with early frames waiting for the progress thread.
    ready: Vec<GlobalKey>,
    /// Joins so far per (uid, device), across runs: the `seq` of a key.
    seqs: HashMap<(u64, u32), u64>,
    /// Keys of launches that ended here, recent first.
    ended: VecDeque<GlobalKey>,
}

pub struct Progress {
    routes: Mutex<Routes>,
    /// This process's end of a multi-process job, once attached.
    node: std::sync::OnceLock<std::sync::Arc<Node>>,
    /// Held by whoever moves frames (the progress thread or a waiter):
    /// one at a time, so frames are applied in arrival order.
    moving: std::sync::Mutex<()>,
    /// A waiter is moving frames (at most one: the others park); the
    /// progress thread stays out of its way meanwhile.
    driving: AtomicBool,
    /// The progress thread, and whether a waiter that parked since wants
    /// it polling busily again (frames it waits for may come any moment).
    thread: std::sync::OnceLock<std::thread::Thread>,
    kicked: AtomicBool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            routes: Mutex::new(Routes::default()),
            node: std::sync::OnceLock::new(),
            moving: std::sync::Mutex::new(()),
            driving: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            kicked: AtomicBool::new(false),
        }
    }

    /// Attaches this process to a multi-process job: frames from the other
    /// processes, through `transport`, go to `launches`' runtimes from now
    /// on, moved by a progress thread.
    pub fn attach(&'static self, transport: Box<dyn Transport>, launches: &'static dyn Launches) -> Result<()> {
        let node = std::sync::Arc::new(Node::new(transport));
        if self.node.set(std::sync::Arc::clone(&node)).is_err() {
            return Err(RtError::value("this process is attached to a multi-process job already"));
        }
        let weak = std::sync::Arc::downgrade(&node);
        node.set_driver(std::sync::Arc::new(move |ready: &dyn Fn() -> bool| match weak.upgrade() {
            Some(node) => self.drive(&node, launches, ready),
            None => false,
        }));
        let thread = std::thread::Builder::new()
            .name("mosaic_rt-progress".into())
            .spawn(move || self.progress(&node, launches))
            .map_err(|e| RtError::internal(format!("cannot start the progress thread: {e}")))?;
        let _ = self.thread.set(thread.thread().clone());
        Ok(())
    }

    /// Stops the transport for good (the process is exiting).
    pub fn detach(&self) {
        if let Some(node) = self.node.get() {
            node.close();
        }
    }

    /// This process's end of the job, once attached.
    pub fn node(&self) -> Option<&std::sync::Arc<Node>> {
        self.node.get()
    }

    /// This process's index in its job, once attached.
    pub fn process(&self) -> Option<u32> {
        self.node.get().map(|n| n.process())
    }

    /// The key across processes of `device`'s next launch of kernel `uid`
    /// under `config`, if that launch spans processes (and can: this
    /// process is attached and owns `device`).
    pub fn next_key(&self, uid: u64, config: &Config, device: u32) -> Result<Option<GlobalKey>> {
        if !self.spans_processes(config, device)? {
            return Ok(None);
        }
        let mut r = lock(&self.routes);
        let seq = r.seqs.entry((uid, device)).or_insert(0);
        *seq += 1;
        Ok(Some(GlobalKey { uid, seq: *seq - 1 }))
    }

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

    /// Launch `key` began here as `handle`: its frames go to `runtime`
    /// (those kept so far, by the progress thread).
    pub fn begin(&self, key: GlobalKey, handle: u64, runtime: &Arc<Runtime>) {
        let mut r = lock(&self.routes);
        r.begun.insert(key, (handle, Arc::clone(runtime)));
        if r.early.contains_key(&key) {
            r.ready.push(key);
        }
    }

    /// Launch `key` ended here: its late frames are dropped.
    pub fn end(&self, key: GlobalKey) {
        let mut r = lock(&self.routes);
        r.begun.remove(&key);
        r.early.remove(&key);
        r.ended.push_front(key);
        r.ended.truncate(MAX_ENDED);
    }

    /// Runs frames from other processes until the process ends: polls
    /// busily while frames flow, then backs off to sleeping.
    fn progress(&self, node: &Node, launches: &dyn Launches) {
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
            let moved = match self.moving.try_lock() {
                Ok(_guard) => self.move_frames(node, launches),
                Err(_) => 0,
            };
            if moved > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                backoff(idle);
            }
        }
    }

    /// Delivers what arrived; how many frames (call holding `moving`).
    fn move_frames(&self, node: &Node, launches: &dyn Launches) -> usize {
        self.deliver_ready(launches);
        match node.poll() {
            Ok(frames) => {
                let n = frames.len();
                for f in frames {
                    self.deliver(f, launches);
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
    fn drive(&self, node: &Node, launches: &dyn Launches, ready: &dyn Fn() -> bool) -> bool {
        if self.driving.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let ready_now = {
            // The progress thread holds the lock for one poll at most.
            let _guard = self.moving.lock().ignore_poison();
            let start = std::time::Instant::now();
            loop {
                self.move_frames(node, launches);
                if ready() {
                    break true;
                }
                if start.elapsed() >= DRIVE_BUDGET {
                    break false;
                }
                std::hint::spin_loop();
            }
        };
        self.driving.store(false, Ordering::Release);
        if !ready_now {
            // This waiter parks now: the progress thread takes over, busily.
            self.kicked.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
        ready_now
    }

    /// Delivers the early frames of launches begun since.
    fn deliver_ready(&self, launches: &dyn Launches) {
        let work: Vec<(Arc<Runtime>, u64, Vec<Envelope>)> = {
            let mut r = lock(&self.routes);
            if r.ready.is_empty() {
                return;
            }
            let keys = std::mem::take(&mut r.ready);
            keys.into_iter()
                .filter_map(|k| {
                    let (h, rt) = r.begun.get(&k).map(|(h, rt)| (*h, Arc::clone(rt)))?;
                    let frames = r.early.remove(&k)?;
                    Some((rt, h, frames))
                })
                .collect()
        };
        for (rt, handle, frames) in work {
            for f in frames {
                apply(&rt, handle, f, launches);
            }
        }
    }

    /// One frame from another process: to its launch, or kept until the
    /// launch begins here.
    fn deliver(&self, bytes: Payload, launches: &dyn Launches) {
        let frame = match decode_incoming(bytes) {
            Ok(Incoming::Whole(f)) => f,
            Ok(Incoming::DataFollows { envelope, len }) => match self.take_data(envelope, len) {
                Some(f) => f,
                None => return,
            },
            Err(e) => return eprintln!("mosaic_rt: dropped a message from another process: {}", e.message),
        };
        let (rt, handle, early) = {
            let mut r = lock(&self.routes);
            let Some((handle, rt)) = r.begun.get(&frame.key).map(|(h, rt)| (*h, Arc::clone(rt))) else {
                let ended = r.ended.contains(&frame.key);
                drop(r);
                return self.not_here(frame, ended);
            };
            let early = r.early.remove(&frame.key).unwrap_or_default();
            (rt, handle, early)
        };
        for f in early.into_iter().chain(std::iter::once(frame)) {
            apply(&rt, handle, f, launches);
        }
    }

    /// The data following an eager DMA's header: landed in place when its
    /// launch runs here with no earlier frame kept for it (arrival order),
    /// else taken into a buffer and returned in the frame, delivered as
    /// any other.
    fn take_data(&self, mut frame: Envelope, len: usize) -> Option<Envelope> {
        let node = self.node.get()?;
        let from = frame.from;
        let rt = {
            let r = lock(&self.routes);
            match r.early.contains_key(&frame.key) {
                true => None,
                false => r.begun.get(&frame.key).map(|(_, rt)| Arc::clone(rt)),
            }
        };
        if rt.is_some_and(|rt| rt.deliver_in_place(&frame, len, &mut |into: &mut [u8]| node.receive_data(from, into))) {
            return None;
        }
        let mut data = Payload::for_receive(len);
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
                    lock(&self.routes).early.get(&frame.key).map_or(0, |f| f.iter().filter(|f| f.msg.counted()).count())
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
            lock(&self.routes).early.entry(frame.key).or_default().push(frame);
        }
    }
}

/// One frame to the runtime of launch `handle`; a process leaving may end
/// the launch here (the registry's call, made without the routes' lock).
fn apply(rt: &Runtime, handle: u64, frame: Envelope, launches: &dyn Launches) {
    if frame.msg == Msg::Left {
        let from = frame.from;
        rt.deliver(frame);
        launches.peer_left(handle, from);
        return;
    }
    rt.deliver(frame);
}
