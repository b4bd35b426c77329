//! Where queued reports (races, leaks, misuse of policy "warn") go when a
//! device's program ends: to the sink the embedding installs (the Python
//! binding issues them in the caller's context), before the device's
//! outputs are ready, so whoever waits for the results has seen them.
//! Without a sink they stay queued for `reports::take_all`.

use mosaic_rt_core::{reports, Result};
use std::sync::OnceLock;

/// Delivers what is queued; `(handle, device)` is the launch and device
/// whose program is ending (an `Err` fails that launch).
pub type Sink = fn(handle: u64, device: u32) -> Result<()>;

static SINK: OnceLock<Sink> = OnceLock::new();

/// Installs the process's sink; `false` if one was installed already.
pub fn set(sink: Sink) -> bool {
    SINK.set(sink).is_ok()
}

/// Hands the queued reports to the sink, if there is one and anything is
/// queued (the common case costs one lock).
pub(crate) fn deliver(handle: u64, device: u32) -> Result<()> {
    match SINK.get() {
        Some(sink) if reports::pending() > 0 => sink(handle, device),
        _ => Ok(()),
    }
}
