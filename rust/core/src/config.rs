//! Static configuration of one runtime (one running kernel).

use crate::error::{Result, RtError};
use crate::spin::AdaptiveSpin;
use mosaic_rt_wire::wire_enum;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A wait timeout of `seconds` (>= 0). `inf`, and any timeout too long for
/// its deadline to be representable, mean no timeout: such a wait could
/// never time out anyway. NaN and negative values are errors.
pub fn timeout_from_secs(seconds: f64) -> Result<Option<Duration>> {
    if seconds.is_nan() || seconds < 0.0 {
        return Err(RtError::value(format!(
            "wait_timeout must be None or a number of seconds >= 0 (inf: no timeout), got {seconds:?}"
        )));
    }
    Ok(Duration::try_from_secs_f64(seconds).ok().filter(|&d| Instant::now().checked_add(d).is_some()))
}

wire_enum! {
    pub enum DmaMode as setting "dma_execution_mode" {
        /// Copy at `dma_start`.
        Eager = 0 => "eager",
        /// Queue the copy; a core waiting on the DMA's semaphore runs it.
        OnWait = 1 => "on_wait",
        /// A copy within a core at `dma_start` (as `Eager`); a copy to
        /// another core reads its source at `dma_start` and lands at the
        /// destination core's next synchronisation point (see `dma`).
        Tpu = 2 => "tpu",
    }
}

wire_enum! {
    pub enum OobReads as setting "out_of_bounds_reads" {
        Raise = 0 => "raise",
        /// Out-of-bounds parts of a read return the fill value.
        Uninitialized = 1 => "uninitialized",
        /// As a TPU: a kernel's own loads of VMEM and SMEM are not bounds
        /// checked (out-of-bounds parts return the fill value and are
        /// reported once per source line as misuse); DMA reads raise, as a
        /// TPU's DMA engine checks them.
        Tpu = 2 => "tpu",
    }
}

wire_enum! {
    pub enum FillMode as setting "uninitialized_memory" {
        /// NaN for floats, the max value for integers, `true` for bool.
        Nan = 0 => "nan",
        Zero = 1 => "zero",
    }
}

wire_enum! {
    /// What a data race does (`detect_races=True`).
    pub enum RacePolicy as setting "on_race" {
        /// The first race fails the launch (`RaceError`).
        Raise = 0 => "raise",
        /// Each race is queued as a report for Python to issue as a warning.
        Warn = 1 => "warn",
        /// The first race of a launch is printed to stderr (a runtime driven
        /// directly; stock's behaviour).
        Print = 2 => "print",
    }
}

wire_enum! {
    /// What semaphores left non-zero (or DMAs never waited for) at kernel
    /// end do (`on_semaphore_leak`).
    pub enum LeakPolicy as setting "leak policy" {
        Ignore = 0 => "ignore",
        /// One report per leak, for Python to issue as a warning.
        Warn = 1 => "warn",
        /// The launch fails naming every leak (`SemaphoreLeakError`).
        Raise = 2 => "raise",
    }
}

/// Devices x cores. Global core id = device * cores_per_device + local core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    pub num_devices: u32,
    pub cores_per_device: u32,
}

impl Topology {
    pub fn num_cores(&self) -> u32 {
        self.num_devices * self.cores_per_device
    }
    pub fn global_core(&self, device: u32, core: u32) -> u32 {
        device * self.cores_per_device + core
    }

    /// Stock's wrap of a negative signal target: its per-core tables are
    /// indexed by the global core id `device * cores + core`, so a negative
    /// id that is still >= `-num_cores()` wraps once (device -1 is the last
    /// device; core -1 of device 0 the last core of the last device). Other
    /// ids pass unchanged, for the range check to name.
    pub fn wrap_negative(&self, device: i64, core: i64) -> (i64, i64) {
        let cores = i64::from(self.cores_per_device.max(1));
        let total = i64::from(self.num_devices.max(1)) * cores;
        let global = device * cores + core;
        if global < 0 && global + total >= 0 {
            ((global + total) / cores, (global + total) % cores)
        } else {
            (device, core)
        }
    }
    /// Checks a (device, core) pair and returns its global core id. The one
    /// range check of device and core ids: every layer uses it (or
    /// [`Self::device_id`] / [`Self::core_id`] for ids given as any integer).
    #[inline]
    pub fn check(&self, device: u32, core: u32) -> Result<u32> {
        if device >= self.num_devices {
            return Err(self.device_out_of_range(device.into()));
        }
        if core >= self.cores_per_device {
            return Err(self.core_out_of_range(core.into()));
        }
        Ok(self.global_core(device, core))
    }

    /// Checks a device id alone.
    #[inline]
    pub fn check_device(&self, device: u32) -> Result<()> {
        if device >= self.num_devices {
            return Err(self.device_out_of_range(device.into()));
        }
        Ok(())
    }

    /// A device id given as any integer (negative ones included), checked.
    pub fn device_id(&self, device: i64) -> Result<u32> {
        u32::try_from(device).ok().filter(|&d| d < self.num_devices).ok_or_else(|| self.device_out_of_range(device))
    }

    /// A core id given as any integer, checked.
    pub fn core_id(&self, core: i64) -> Result<u32> {
        u32::try_from(core).ok().filter(|&c| c < self.cores_per_device).ok_or_else(|| self.core_out_of_range(core))
    }

    #[cold]
    #[inline(never)]
    fn device_out_of_range(&self, device: i64) -> RtError {
        RtError::value(format!(
            "device id {device} out of range: the kernel runs on {} device(s) (valid ids 0 to {})",
            self.num_devices,
            self.num_devices.saturating_sub(1)
        ))
    }

    #[cold]
    #[inline(never)]
    fn core_out_of_range(&self, core: i64) -> RtError {
        RtError::value(format!(
            "core id {core} out of range: each device has {} core(s) (valid ids 0 to {})",
            self.cores_per_device,
            self.cores_per_device.saturating_sub(1)
        ))
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub num_devices: u32,
    pub cores_per_device: u32,
    pub dma_mode: DmaMode,
    pub oob_reads: OobReads,
    pub fill: FillMode,
    /// A blocking wait (semaphore, DMA, barrier) fails after this long.
    /// `None`: wait until signalled or until the kernel fails elsewhere.
    pub wait_timeout: Option<Duration>,
    /// Check every access for data races (`detect_races=True`).
    pub detect_races: bool,
    /// What a race does (with `detect_races`).
    pub on_race: RacePolicy,
    /// Reports of policy "warn" (races, leaks, misuse) are for Python to
    /// issue as warnings (`true`) or the way the installed jax's stock
    /// interpreter reports the same event: printed or logged (`false`).
    pub report_as_warnings: bool,
    /// initcheck: a read of kernel-local memory (every space but HBM/ANY)
    /// that nothing wrote in this launch is an `Uninitialized` error.
    pub detect_uninitialized: bool,
    /// Record a timeline (grid steps, DMAs, waits, signals) for export as
    /// Chrome trace-event JSON (`Runtime::trace_json`).
    pub trace: bool,
    /// Before a wait parks its thread (after running any queued DMA), watch
    /// the counter for a while, learnt by this state (see [`AdaptiveSpin`]:
    /// spinning stops when spins stop paying, e.g. on oversubscribed CPUs).
    /// Share one `Arc` across runtimes to carry what it learnt over. Waking
    /// a parked thread costs microseconds of OS scheduling, but spinning
    /// only pays when every simulated core has a CPU of its own, so the
    /// default is to park at once.
    pub spin_before_park: Option<Arc<AdaptiveSpin>>,
    /// Fail every blocked core with a deadlock error as soon as none can
    /// continue (see `deadlock`). Off for a runtime driven directly, where
    /// any thread may act as any core; kernel launches turn it on.
    pub detect_deadlocks: bool,
    /// With `detect_deadlocks`: how long the whole process must have been
    /// idle before devices that never joined, and cores not blocked in
    /// mosaic_rt, count as stuck. `None` turns that heuristic off.
    pub deadlock_idle: Option<Duration>,
    /// The process of each device when the launch spans processes (see
    /// `crate::remote`); `None`: every device is owned here.
    pub owners: Option<Arc<[u32]>>,
}

/// Default idle window of the deadlock heuristic.
pub const DEFAULT_DEADLOCK_IDLE: Duration = Duration::from_millis(800);

impl Default for Config {
    fn default() -> Self {
        Config {
            num_devices: 1,
            cores_per_device: 1,
            dma_mode: DmaMode::OnWait,
            oob_reads: OobReads::Raise,
            fill: FillMode::Nan,
            wait_timeout: Some(Duration::from_secs(120)),
            detect_races: false,
            on_race: RacePolicy::Print,
            report_as_warnings: true,
            detect_uninitialized: false,
            trace: false,
            spin_before_park: None,
            detect_deadlocks: false,
            deadlock_idle: Some(DEFAULT_DEADLOCK_IDLE),
            owners: None,
        }
    }
}

impl Config {
    pub fn topology(&self) -> Topology {
        Topology { num_devices: self.num_devices, cores_per_device: self.cores_per_device }
    }
    pub fn validate(&self) -> Result<()> {
        if self.num_devices == 0 || self.cores_per_device == 0 {
            return Err(RtError::value(format!(
                "a runtime needs at least one device and one core per device, got {} x {}",
                self.num_devices, self.cores_per_device
            )));
        }
        if self.num_devices.checked_mul(self.cores_per_device).is_none_or(|n| n > 1 << 16) {
            return Err(RtError::value("too many cores (at most 65536 in total)"));
        }
        if let Some(owners) = &self.owners {
            if owners.len() != self.num_devices as usize {
                return Err(RtError::value(format!(
                    "the launch has {} device(s) but names the process of {}",
                    self.num_devices,
                    owners.len()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Topology;

    #[test]
    fn negative_targets_wrap_once_through_the_global_core_id() {
        let t = Topology { num_devices: 4, cores_per_device: 2 };
        assert_eq!(t.wrap_negative(-1, 0), (3, 0)); // global -2 -> 6
        assert_eq!(t.wrap_negative(0, -1), (3, 1)); // global -1 -> 7: last core of the last device
        assert_eq!(t.wrap_negative(-4, 0), (0, 0)); // global -8 -> 0
        assert_eq!(t.wrap_negative(-5, 0), (-5, 0)); // past the wrap: left for the range check
        assert_eq!(t.wrap_negative(2, 1), (2, 1));
        assert_eq!(t.wrap_negative(9, 0), (9, 0));
    }
}
