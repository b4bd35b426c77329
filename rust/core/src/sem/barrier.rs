//! Rendezvous of all devices (stock's device barrier), reusable through
//! generations and abortable by the kernel's failure.

use super::park::Failure;
use crate::deadlock::{Monitor, Probe};
use crate::error::{ErrorKind, Result, RtError};
use crate::sync::{lock, Condvar, IgnorePoison, Mutex};
use std::time::{Duration, Instant};

struct BarrierState {
    generation: u64,
    arrived: u32,
    /// Devices of other processes arrived, by generation (a process may
    /// report the next generation before this one completes here).
    remote: std::collections::BTreeMap<u64, u32>,
    /// Devices owned here (all of them in a launch of one process).
    local: u32,
    /// Arrivals that complete a generation (all devices; the local ones
    /// of a launch whose other processes are unreachable).
    expected: u32,
}

pub(crate) struct DeviceBarrier {
    num_devices: u32,
    state: Mutex<BarrierState>,
    cv: Condvar,
}

impl DeviceBarrier {
    pub fn new(num_devices: u32) -> Self {
        let state = BarrierState {
            generation: 0,
            arrived: 0,
            remote: Default::default(),
            local: num_devices,
            expected: num_devices,
        };
        DeviceBarrier { num_devices, state: Mutex::new(state), cv: Condvar::new() }
    }

    /// Only `local` devices are owned here; the others arrive through
    /// [`Self::arrive_remote`].
    /// `isolated`: the others never arrive (no transport): the local
    /// devices alone complete a generation.
    pub fn set_local(&self, local: u32, isolated: bool) {
        let mut st = lock(&self.state);
        st.local = local;
        if isolated {
            st.expected = local;
        }
    }

    /// `count` devices of another process arrived at `generation`.
    pub fn arrive_remote(&self, generation: u64, count: u32, on_complete: &dyn Fn(), monitor: &Monitor) {
        let mut st = lock(&self.state);
        *st.remote.entry(generation).or_insert(0) += count;
        if generation == st.generation {
            self.complete_if_full(&mut st, on_complete, monitor);
        }
    }

    /// Completes the current generation if every device arrived.
    fn complete_if_full(&self, st: &mut BarrierState, on_complete: &dyn Fn(), monitor: &Monitor) -> bool {
        let remote = st.remote.get(&st.generation).copied().unwrap_or(0);
        if st.arrived + remote < st.expected {
            return false;
        }
        on_complete();
        monitor.barrier_completed(st.generation);
        let generation = st.generation;
        st.remote.remove(&generation);
        st.arrived = 0;
        st.generation += 1;
        self.cv.notify_all();
        true
    }

    /// Wakes waiters so they notice a failure (set before this call).
    pub fn wake_all(&self) {
        let _guard = lock(&self.state);
        self.cv.notify_all();
    }

    /// `on_complete` runs once per generation, by the last device to
    /// arrive, before any device leaves (the race detector joins clocks).
    /// A device that would complete a deadlock by waiting gets the
    /// deadlock error (its arrival taken back) and must fail the launch.
    /// `on_local(generation, count)` runs when the last local device of a
    /// launch spanning processes arrives (to tell the others).
    #[allow(clippy::too_many_arguments)]
    pub fn arrive(
        &self,
        failure: &Failure,
        device: u32,
        timeout: Option<Duration>,
        on_complete: &dyn Fn(),
        on_local: &dyn Fn(u64, u32),
        monitor: &Monitor,
        probe: &dyn Probe,
    ) -> Result<()> {
        let mut st = lock(&self.state);
        if let Some(root) = failure.get() {
            return Err(super::failed(&root, device, 0));
        }
        st.arrived += 1;
        if st.arrived == st.local && st.local < st.expected {
            on_local(st.generation, st.local);
        }
        if self.complete_if_full(&mut st, on_complete, monitor) {
            return Ok(());
        }
        let generation = st.generation;
        if let Some(deadlock) = monitor.enter_barrier(device, generation, probe) {
            st.arrived -= 1;
            monitor.leave_barrier(device);
            return Err(deadlock);
        }
        let deadline = super::deadline_after(timeout);
        loop {
            if st.generation != generation {
                monitor.leave_barrier(device);
                return Ok(());
            }
            // Leaving early: take our arrival back so the count stays true.
            if let Some(root) = failure.get() {
                st.arrived -= 1;
                monitor.leave_barrier(device);
                return Err(super::failed(&root, device, 0));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                st.arrived -= 1;
                monitor.leave_barrier(device);
                let secs = timeout.unwrap_or_default().as_secs_f64();
                return Err(RtError::new(
                    ErrorKind::Timeout,
                    format!(
                        "device barrier on device {device} waited {secs}s; {} of {} devices arrived",
                        st.arrived + 1,
                        self.num_devices
                    ),
                ));
            }
            st = self.sleep(st, deadline.map(|d| d - now));
        }
    }

    #[cfg(not(loom))]
    fn sleep<'a>(
        &self,
        st: crate::sync::MutexGuard<'a, BarrierState>,
        left: Option<Duration>,
    ) -> crate::sync::MutexGuard<'a, BarrierState> {
        match left {
            None => self.cv.wait(st).ignore_poison(),
            Some(l) => self.cv.wait_timeout(st, l).ignore_poison().0,
        }
    }

    #[cfg(loom)]
    fn sleep<'a>(
        &self,
        st: crate::sync::MutexGuard<'a, BarrierState>,
        _left: Option<Duration>,
    ) -> crate::sync::MutexGuard<'a, BarrierState> {
        self.cv.wait(st).ignore_poison()
    }
}
