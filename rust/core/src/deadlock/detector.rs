//! The process-wide deadlock detector thread.
//!
//! Transitions catch every deadlock whose cores are all known to be
//! blocked. This thread, started with the first watched runtime, looks at
//! each live one every [`PERIOD`] for the rest: devices that never joined
//! and cores that stopped without telling us, counted as stuck only once
//! the whole process has been idle -- no more than [`BUSY_FRACTION`] of
//! one CPU used -- for the runtime's idle window. It holds only weak
//! references, so a finished launch is freed as usual.

use crate::sync::IgnorePoison;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the detector looks.
pub const PERIOD: Duration = Duration::from_millis(100);

/// A period in which the process used more CPU time than this fraction of
/// the period counts as busy (a slow device computing uses a whole CPU; a
/// process that is only waiting uses next to nothing).
pub const BUSY_FRACTION: f64 = 0.05;

/// Something the detector looks at periodically.
pub trait Watched: Send + Sync {
    /// `process_idle_since`: since when the process has been idle (`None`:
    /// unknown on this platform).
    fn tick(&self, process_idle_since: Option<Instant>, now: Instant);
}

struct Shared {
    watched: Mutex<Vec<Weak<dyn Watched>>>,
    wake: Condvar,
}

fn shared() -> &'static Arc<Shared> {
    static SHARED: std::sync::OnceLock<Arc<Shared>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let s = Arc::new(Shared { watched: Mutex::new(Vec::new()), wake: Condvar::new() });
        let t = Arc::clone(&s);
        let spawned = std::thread::Builder::new().name("mosaic_rt-deadlock".into()).spawn(move || run(&t));
        // Without the thread only the transition checks remain.
        drop(spawned);
        s
    })
}

/// Starts watching `w` (until it is dropped).
pub fn watch(w: Weak<dyn Watched>) {
    let s = shared();
    s.watched.lock().ignore_poison().push(w);
    s.wake.notify_all();
}

fn run(s: &Shared) {
    let mut last_cpu = process_cpu_time();
    let mut busy_at = Instant::now();
    loop {
        {
            let mut w = s.watched.lock().ignore_poison();
            w.retain(|x| x.strong_count() > 0);
            if w.is_empty() {
                // Nothing to watch: sleep until something is.
                let _unused = s.wake.wait(w).ignore_poison();
                last_cpu = process_cpu_time();
                busy_at = Instant::now();
                continue;
            }
        }
        std::thread::sleep(PERIOD);
        let now = Instant::now();
        let cpu = process_cpu_time();
        let idle_since = match (last_cpu, cpu) {
            (Some(a), Some(b)) => {
                if b.saturating_sub(a).as_secs_f64() > PERIOD.as_secs_f64() * BUSY_FRACTION {
                    busy_at = now;
                }
                Some(busy_at)
            }
            _ => None,
        };
        last_cpu = cpu;
        let live: Vec<Arc<dyn Watched>> = {
            let w = s.watched.lock().ignore_poison();
            w.iter().filter_map(Weak::upgrade).collect()
        };
        for x in live {
            x.tick(idle_since, now);
        }
    }
}

/// CPU time used so far by every thread of this process.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub fn process_cpu_time() -> Option<Duration> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` from the C library writes one `struct
    // timespec` (two 64-bit fields on 64-bit Linux) through a valid pointer
    // to a local.
    let rc = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32))
}

/// Unknown elsewhere: the idle heuristic stays off.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub fn process_cpu_time() -> Option<Duration> {
    None
}
