//! One launch across several processes: the devices this process does not
//! own, reached through a [`Transport`].
//!
//! Each process runs the programs of its own devices in a runtime of its
//! own; a launch's `owners` (the process of each device) tell it which
//! devices are elsewhere. What a core does to a device of another process
//! becomes a message ([`wire::Msg`]) to that process, applied there by its
//! progress thread, one frame at a time in arrival order (frames between
//! two processes arrive in the order they were sent):
//!
//! * a remote signal: `Signal`, added to the target's counter;
//! * an eager remote DMA: read here at its start (the send semaphore is
//!   signalled here), `DmaEager` carries the bytes, written and signalled
//!   there;
//! * an on_wait remote DMA: its read is queued here on the send semaphore
//!   (as in one process), `DmaQueued` queues its write there on the
//!   receive semaphore. Whoever needs the data first reads it -- a waiter
//!   here on the send semaphore, or a waiter there, whose `DmaRead` asks
//!   this process to -- and `DmaData` takes it across; it is written when
//!   a waiter there needs it, exactly as in one process;
//! * the device barrier: `Barrier` counts the devices of each process;
//! * a failure: `Fail` carries the root cause to every process;
//! * the end of a process's part: `Left` (a launch lives until every
//!   process has left, so late reads of its memory are served);
//! * deadlock detection across processes (`detect`): `Probe` / `Status`
//!   waves, the four-counter method: a launch is deadlocked when two
//!   consecutive waves find every process quiescent, every counted message
//!   received, and nothing changed in between.
//!
//! Frames are moved by the progress engine (`progress`), which keeps
//! messages for a launch this process has not begun yet; messages for a
//! semaphore or buffer not allocated yet wait in the launch (`Link::held`)
//! and are applied once it is.
//!
//! The core knows no MPI: a [`Transport`] moves opaque frames (the MPI
//! binding lives outside the core; `LoopbackHub` connects processes
//! simulated in one process, for tests).

pub mod detect;
mod link;
mod loopback;
pub mod payload;
pub(crate) mod progress;
pub mod wire;

pub use link::Link;
pub use loopback::LoopbackHub;
pub use payload::Payload;
pub use wire::{GlobalKey, Incoming, Msg};

use crate::error::Result;

/// Moves frames between the processes of a job. Frames from one process to
/// another must arrive in the order they were sent.
pub trait Transport: Send + Sync {
    /// This process's index (as launches' `owners` number processes).
    fn process(&self) -> u32;
    /// Sends `frame` to process `to` without waiting for it to arrive.
    fn send(&self, to: u32, frame: Payload) -> Result<()>;
    /// Sends `header`, then `data` as a message of its own, which the
    /// receiver takes with [`Transport::receive_data`] right after polling
    /// `header` (so it can land in place).
    fn send_split(&self, to: u32, header: Payload, data: Payload) -> Result<()>;
    /// Receives into `into` the data of the [`Transport::send_split`] from
    /// process `from` whose header was polled last (exactly `into.len()`
    /// bytes); blocks until it has arrived.
    fn receive_data(&self, from: u32, into: &mut [u8]) -> Result<()>;
    /// The frames that have arrived since the last call (never blocks
    /// long; the caller delivers them after the transport's locks are
    /// released).
    fn poll(&self) -> Result<Vec<Payload>>;
    /// Stops using the underlying library for good (before it shuts down
    /// at process exit): sends fail, polls find nothing.
    fn close(&self) {}
}

/// Run by a waiter about to park: moves frames from other processes (if
/// no other thread is doing so) until `ready()` or a short budget ends;
/// true if `ready()` became true. A ping-pong between processes then
/// costs no thread wake-up on either side.
pub type Driver = std::sync::Arc<dyn Fn(&dyn Fn() -> bool) -> bool + Send + Sync>;

/// How long a waiter drives progress before it parks.
pub const DRIVE_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// This process's end of the job: the transport and where frames go.
pub struct Node {
    transport: Box<dyn Transport>,
    me: u32,
    /// Set by the progress engine at attach (it delivers the frames).
    driver: std::sync::OnceLock<Driver>,
}

impl Node {
    pub fn new(transport: Box<dyn Transport>) -> Node {
        let me = transport.process();
        Node { transport, me, driver: std::sync::OnceLock::new() }
    }

    pub fn set_driver(&self, driver: Driver) {
        let _ = self.driver.set(driver);
    }

    pub fn driver(&self) -> Option<Driver> {
        self.driver.get().cloned()
    }

    pub fn process(&self) -> u32 {
        self.me
    }

    /// Sends `msg` of launch `key` to process `to`.
    pub fn send(&self, to: u32, key: GlobalKey, msg: Msg) -> Result<()> {
        match wire::encode_split(self.me, key, msg) {
            (frame, None) => self.transport.send(to, frame),
            (header, Some(data)) => self.transport.send_split(to, header, data),
        }
    }

    /// The data following the header just polled from process `from`.
    pub fn receive_data(&self, from: u32, into: &mut [u8]) -> Result<()> {
        self.transport.receive_data(from, into)
    }

    pub fn poll(&self) -> Result<Vec<Payload>> {
        self.transport.poll()
    }

    pub fn close(&self) {
        self.transport.close()
    }
}

/// Locks a std mutex, ignoring poisoning (remote state is not part of the
/// loom models, so it uses std's locks even there).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    use crate::sync::IgnorePoison;
    m.lock().ignore_poison()
}

/// The progress thread's pause after `idle` empty polls in a row: busy
/// while frames flow (a round trip between processes is a few
/// microseconds), then sleeps growing to a millisecond.
pub(crate) fn backoff(idle: u32) {
    if idle < 2000 {
        std::hint::spin_loop();
        if idle % 64 == 0 {
            std::thread::yield_now();
        }
        return;
    }
    let us = 20u64 << ((idle - 2000) / 64).min(6);
    // Parked, not slept: a waiter that gives up driving wakes it (`kick`).
    std::thread::park_timeout(std::time::Duration::from_micros(us.min(1000)));
}

/// The error of a signal or DMA to a device of a process this one is not
/// attached to.
pub fn unreachable(device: u32) -> crate::error::RtError {
    crate::error::RtError::new(
        crate::error::ErrorKind::Runtime,
        format!(
            "device {device} belongs to another process, and this process is not attached to the others \
             (MPI): pip install \"mosaic_rt[mpi]\", run under mpirun, and call \
             mosaic_rt.distributed.initialize() (or attach())"
        ),
    )
}
