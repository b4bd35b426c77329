//! The text of a deadlock report.

use super::{CoreState, DeadlockState, Probe};
use crate::config::Topology;
use crate::site::{self, SiteId};
use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

/// DMAs started on one (DMA semaphore, global core).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaTotals {
    pub count: u64,
    pub bytes: i64,
    pub last_site: SiteId,
}

fn place(topo: &Topology, g: u32) -> String {
    format!("device {}, core {}", g / topo.cores_per_device, g % topo.cores_per_device)
}

pub(super) fn describe(
    topo: &Topology,
    st: &DeadlockState,
    probe: &dyn Probe,
    dmas: &HashMap<(u32, u32), DmaTotals>,
    idle: Option<Duration>,
) -> String {
    let mut lines = Vec::new();
    let mut hints = Vec::new();
    // Devices not in the barrier, for barrier waiters.
    let in_barrier: Vec<bool> = (0..topo.num_devices)
        .map(|d| matches!(st.cores[topo.global_core(d, 0) as usize], CoreState::Barrier { .. }))
        .collect();
    let mut edges: Vec<(u32, Vec<u32>)> = Vec::new();
    for (g, s) in st.cores.iter().enumerate() {
        let g = g as u32;
        let device = g / topo.cores_per_device;
        if st.remote[device as usize] {
            continue; // another process reports it
        }
        let mut line = format!("  {}: ", place(topo, g));
        match *s {
            CoreState::Parked(w) => {
                let (kind, count) = probe.describe(w.sem, g);
                let unit = if probe.is_dma(w.sem) { " bytes" } else { "" };
                let _ = write!(
                    line,
                    "waits on {kind} semaphore {} for {}{unit} (count is {count}){}",
                    w.sem,
                    w.value,
                    site::at(w.site)
                );
                if probe.is_dma(w.sem) {
                    match dmas.get(&(w.sem, g)) {
                        None => {
                            let _ = write!(
                                line,
                                "; waiting for {} bytes on DMA semaphore {}: no DMA was started on it",
                                w.value, w.sem
                            );
                        }
                        Some(t) => {
                            // Nothing queued on this (semaphore, core) -- else the
                            // waiter could run it -- so every DMA started on it has
                            // signalled it: what the count lacks, earlier waits took.
                            let taken = (t.bytes - count).clamp(0, t.bytes);
                            let _ = write!(
                                line,
                                "; waiting for {} bytes on DMA semaphore {}: the {} DMA(s) started on it \
                                 have all delivered, {} bytes in all{} (last started{})",
                                w.value,
                                w.sem,
                                t.count,
                                t.bytes,
                                if taken > 0 {
                                    format!(", and earlier waits took {taken} of them")
                                } else {
                                    String::new()
                                },
                                if t.last_site == 0 {
                                    " at an unknown site".to_string()
                                } else {
                                    site::at(t.last_site)
                                }
                            );
                        }
                    }
                }
                if let Some(from) = probe.last_signaller(g).filter(|&f| f != g) {
                    edges.push((g, vec![from]));
                }
                for (other, c) in probe.nonzero_elsewhere(w.sem, g) {
                    hints.push(format!(
                        "semaphore {} has count {c} on {} while {} waits on it: was it signalled on \
                         the wrong core or device?",
                        w.sem,
                        place(topo, other),
                        place(topo, g)
                    ));
                }
            }
            CoreState::Barrier { site: s, .. } => {
                let missing: Vec<u32> = (0..topo.num_devices).filter(|&d| !in_barrier[d as usize]).collect();
                let names: Vec<String> = missing.iter().map(|d| d.to_string()).collect();
                let _ = write!(
                    line,
                    "waits in the device barrier{} for device(s) {} to arrive",
                    site::at(s),
                    names.join(", ")
                );
                edges.push((g, missing.iter().map(|&d| topo.global_core(d, 0)).collect()));
            }
            CoreState::Finished => line.push_str("finished (its program left the launch)"),
            CoreState::Running => {
                if !st.joined[device as usize] {
                    if g % topo.cores_per_device != 0 {
                        continue;
                    }
                    line = format!(
                        "  device {device}: never joined this launch (its program did not reach the \
                         kernel, e.g. a lax.cond branch it did not take, or it is stuck elsewhere)"
                    );
                } else {
                    line.push_str("not in a mosaic_rt wait, but its program has made no progress");
                }
            }
        }
        lines.push(line);
    }
    let mut text = match idle {
        None => format!(
            "deadlock: every core of the launch ({} device(s) x {} core(s)) is blocked and nothing \
             pending can wake any of them:\n",
            topo.num_devices, topo.cores_per_device
        ),
        Some(d) => format!(
            "deadlock: the launch ({} device(s) x {} core(s)) has waiters that nothing can wake; \
             the process used no CPU time for {:.1} s:\n",
            topo.num_devices,
            topo.cores_per_device,
            d.as_secs_f64()
        ),
    };
    text.push_str(&lines.join("\n"));
    if let Some(cycle) = find_cycle(&edges) {
        let names: Vec<String> = cycle.iter().map(|&g| place(topo, g)).collect();
        let _ = write!(
            text,
            "\ncycle (each waits for the next: the core that signalled it before, or a device \
             missing from the barrier): {}",
            names.join(" -> ")
        );
    }
    for h in hints {
        let _ = write!(text, "\nhint: {h}");
    }
    text
}

/// A cycle in the wait-for graph (`edges`: waiter -> the cores it waits
/// for), as the list of cores around it with the first repeated at the end.
fn find_cycle(edges: &[(u32, Vec<u32>)]) -> Option<Vec<u32>> {
    let graph: HashMap<u32, &Vec<u32>> = edges.iter().map(|(g, e)| (*g, e)).collect();
    let mut starts: Vec<u32> = graph.keys().copied().collect();
    starts.sort_unstable();
    for &start in &starts {
        let mut path = vec![start];
        let mut cur = start;
        // Follow the smallest successor that waits itself.
        for _ in 0..=graph.len() {
            let Some(next) = graph.get(&cur).and_then(|e| e.iter().copied().filter(|n| graph.contains_key(n)).min())
            else {
                break;
            };
            if let Some(pos) = path.iter().position(|&p| p == next) {
                let mut cycle = path[pos..].to_vec();
                cycle.push(next);
                return Some(cycle);
            }
            path.push(next);
            cur = next;
        }
    }
    None
}
