//! How long a semaphore wait of an XLA launch spins before parking.
//!
//! Waking a parked thread costs a few microseconds of OS scheduling, which
//! is most of a cross-device round trip. When every simulated core can have
//! a CPU of its own, watching the counter for a short while is cheaper. With
//! more simulated cores than CPUs, spinning steals the CPU the signaller
//! needs (measured: an 8-device ring on 2 CPUs went from ~30 us to ~460 us),
//! so then waits park at once. The spin itself lives in the core's wait,
//! after queued DMAs have had their chance to run.

use std::sync::OnceLock;
use std::time::Duration;

/// Longest spin before parking.
const BUDGET: Duration = Duration::from_micros(20);

fn cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

/// The spin budget of a launch of `devices` x `cores` simulated cores.
pub fn budget(devices: u32, cores: u32) -> Option<Duration> {
    (devices.saturating_mul(cores) <= cpus()).then_some(BUDGET)
}
