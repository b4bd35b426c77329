//! Brief spinning before a semaphore wait parks its thread.
//!
//! Waking a parked thread costs a few microseconds of OS scheduling, which
//! is most of a cross-device round trip. When every simulated core can have
//! a CPU of its own, watching the counter for a short while is cheaper. With
//! more simulated cores than CPUs, spinning steals the CPU the signaller
//! needs (measured: an 8-device ring on 2 CPUs went from ~30 us to ~460 us),
//! so then we park at once.

use mosaic_rt_core::Runtime;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest spin before parking.
const BUDGET: Duration = Duration::from_micros(20);

fn cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}

/// Spins until `sem` on (device, core) reaches `value` or the budget is
/// spent, when the launch has no more simulated cores than the machine has
/// CPUs. The wait proper follows either way (and does all the checks).
#[inline]
pub fn before_wait(rt: &Runtime, device: u32, core: u32, sem: u32, value: i64) {
    if rt.topology().num_cores() > cpus() {
        return;
    }
    let start = Instant::now();
    loop {
        for _ in 0..32 {
            match rt.semaphore_read(device, core, sem) {
                Ok(count) if count < value => std::hint::spin_loop(),
                _ => return,
            }
        }
        if start.elapsed() > BUDGET || rt.failure().is_some() {
            return;
        }
    }
}
