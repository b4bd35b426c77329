//! Deadlock detection across processes: the four-counter method.
//!
//! A process whose own cores are all blocked (none can continue on what
//! it has) starts a wave: it asks every peer for its [`Status`]. A wave
//! finds the launch *still* when every process that joined is quiescent
//! (or has left) and as many counted messages were received as were sent.
//! One still wave is not enough (a message may have been sent after one
//! process answered and received before another did), so the launch is
//! deadlocked only when two consecutive still waves saw the very same
//! counts and epochs: nothing happened in between, nothing is in flight.
//! Every process runs its own waves, so each reports the deadlock itself
//! (and its failure reaches the others too).
//!
//! A peer that never joins (its program never called the kernel) is
//! reported once the processes that did have been still for the idle
//! window.

use super::wire::Status;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A wave gets no more answers after this long: it is dropped and the next
/// tick starts another (a peer may have been busy, or slow to start).
pub const WAVE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Waves {
    last_wave: u64,
    /// The wave being collected: when it started and the answers so far
    /// (this process's own included).
    current: Option<(u64, Instant, BTreeMap<u32, Status>)>,
    /// The previous wave's answers, if it was still.
    previous: Option<BTreeMap<u32, Status>>,
    /// Since when every joined process has been still while some never joined.
    unjoined_since: Option<Instant>,
}

/// What a completed wave found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not (yet) deadlocked.
    Running,
    /// Deadlocked: the report text.
    Deadlock(String),
}

impl Waves {
    /// Starts a new wave with this process's own `status` unless one is
    /// being collected (and not yet timed out); the wave number to probe.
    pub fn start(&mut self, me: u32, status: Status, now: Instant) -> Option<u64> {
        if let Some((_, started, _)) = &self.current {
            if now.duration_since(*started) < WAVE_TIMEOUT {
                return None;
            }
        }
        self.last_wave += 1;
        let mut answers = BTreeMap::new();
        answers.insert(me, status);
        self.current = Some((self.last_wave, now, answers));
        Some(self.last_wave)
    }

    /// Records `from`'s answer to `wave`; once every one of `peers` has
    /// answered, judges the wave.
    pub fn answer(&mut self, wave: u64, from: u32, status: Status, peers: &[u32], ctx: &WaveContext) -> Verdict {
        let Some((w, _, answers)) = &mut self.current else { return Verdict::Running };
        if *w != wave {
            return Verdict::Running;
        }
        answers.insert(from, status);
        if !peers.iter().all(|p| answers.contains_key(p)) {
            return Verdict::Running;
        }
        let (_, _, answers) = self.current.take().expect("checked above");
        self.judge(answers, ctx)
    }

    /// Forget the previous wave (this process did something since).
    pub fn reset(&mut self) {
        self.previous = None;
    }

    fn judge(&mut self, answers: BTreeMap<u32, Status>, ctx: &WaveContext) -> Verdict {
        let joined: Vec<&Status> = answers.values().filter(|s| s.joined).collect();
        // Every answer's counts: a process that never joined still holds
        // (has received) what was sent to it.
        let still = joined.iter().all(|s| s.quiescent || s.left)
            && answers.values().map(|s| s.sent).sum::<u64>() == answers.values().map(|s| s.received).sum::<u64>();
        let waiting = joined.iter().any(|s| !s.blocked.is_empty());
        if !still || !waiting {
            self.previous = None;
            self.unjoined_since = None;
            return Verdict::Running;
        }
        let same = self.previous.as_ref().is_some_and(|p| {
            p.len() == answers.len()
                && p.iter().zip(answers.iter()).all(|((a, x), (b, y))| {
                    a == b && x.joined == y.joined && x.sent == y.sent && x.received == y.received && x.epoch == y.epoch
                })
        });
        let unjoined: Vec<u32> = answers.iter().filter(|(_, s)| !s.joined).map(|(&p, _)| p).collect();
        self.previous = Some(answers.clone());
        if !same {
            return Verdict::Running;
        }
        if !unjoined.is_empty() {
            let since = *self.unjoined_since.get_or_insert(ctx.now);
            if ctx.now.duration_since(since) < ctx.idle {
                return Verdict::Running;
            }
        }
        Verdict::Deadlock(report(&answers, &unjoined, ctx))
    }
}

/// What a verdict's report needs to know of the launch.
pub struct WaveContext {
    pub num_devices: u32,
    pub cores_per_device: u32,
    /// The process of each device.
    pub owners: Vec<u32>,
    pub idle: Duration,
    pub now: Instant,
}

fn report(answers: &BTreeMap<u32, Status>, unjoined: &[u32], ctx: &WaveContext) -> String {
    let mut text = format!(
        "deadlock across {} processes: every core of the launch ({} device(s) x {} core(s)) is \
         blocked or finished, no message between the processes is in flight, and nothing pending \
         can wake any of them:",
        answers.len(),
        ctx.num_devices,
        ctx.cores_per_device
    );
    for (p, s) in answers {
        if !s.joined {
            continue;
        }
        text.push_str(&format!("\nprocess {p}:"));
        for line in &s.blocked {
            text.push('\n');
            text.push_str(line);
        }
        if s.blocked.is_empty() {
            text.push_str(if s.left { " every device finished" } else { " no core waits" });
        }
    }
    for p in unjoined {
        let devices: Vec<String> =
            ctx.owners.iter().enumerate().filter(|(_, &o)| o == *p).map(|(d, _)| d.to_string()).collect();
        text.push_str(&format!(
            "\nprocess {p}: device(s) {} never joined this launch (process {p} did not call the kernel, or \
             is stuck before it)",
            devices.join(", ")
        ));
    }
    text
}
