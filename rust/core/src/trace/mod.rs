//! Timelines (`Config::trace`): what every simulated core and DMA did and
//! when, exported as Chrome trace-event JSON (Perfetto UI, chrome://tracing)
//! by [`Tracer::to_json`] (see `export.rs` for the file layout).
//!
//! Recorded: grid steps (between the interpreter's `grid_step` markers),
//! every semaphore / DMA wait and device barrier (from the call to its
//! return: the time the core was blocked), every signal (an instant), every
//! DMA from its start to its completion, and, for each completed wait, a
//! flow from the last signal into its (semaphore, core) -- a core's signal
//! or a DMA's completion -- to the wait.
//!
//! Off the hot path by construction: the runtime holds `Option<Tracer>` and
//! every hook is one branch on it when tracing is off. When on, events go
//! into one mutex-protected log; timestamps are nanoseconds from the
//! launch's start (`Instant`, monotonic across threads).
//!
//! Sites: each event carries the site id of the op that caused it
//! ([`crate::site::current`], set by the FFI layer for the duration of each
//! call; 0 = unknown); the export resolves ids to text through the site
//! table's resolver ([`crate::site::text`]).

mod export;

use crate::site;
use crate::sync::IgnorePoison;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Events kept per launch; later ones are counted as dropped (the export
/// says how many).
pub const MAX_EVENTS: usize = 1_000_000;

/// An event argument.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceArg {
    Int(i64),
    Str(String),
    Ints(Vec<i64>),
}

/// Where a span lives: a core's track, or the DMA lanes of the core that
/// started DMA `id` (lanes are assigned at export so spans never overlap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Track {
    Core(u32),
    Dma { issuer: u32, id: u64 },
}

/// Where a flow starts: a signal instant on a core, or a point of a DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlowSource {
    Core { gcore: u32, ts: u64 },
    Dma { issuer: u32, id: u64, ts: u64 },
}

impl FlowSource {
    fn ts(&self) -> u64 {
        match *self {
            FlowSource::Core { ts, .. } | FlowSource::Dma { ts, .. } => ts,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Event {
    Span {
        track: Track,
        name: String,
        cat: &'static str,
        begin: u64,
        end: u64,
        site: u32,
        args: Vec<(&'static str, TraceArg)>,
    },
    Instant {
        gcore: u32,
        name: String,
        cat: &'static str,
        ts: u64,
        site: u32,
        args: Vec<(&'static str, TraceArg)>,
    },
    Flow {
        id: u64,
        from: FlowSource,
        to_gcore: u32,
        to_ts: u64,
    },
}

/// A DMA in flight.
struct OpenDma {
    issuer: u32,
    begin: u64,
    name: String,
    site: u32,
    args: Vec<(&'static str, TraceArg)>,
}

/// A grid step in progress on a core.
struct OpenStep {
    begin: u64,
    indices: Vec<i64>,
    site: u32,
}

#[derive(Default)]
struct TraceState {
    events: Vec<Event>,
    dropped: u64,
    next_flow: u64,
    next_dma: u64,
    dmas: HashMap<u64, OpenDma>,
    steps: HashMap<u32, OpenStep>,
    /// (semaphore, global core) -> the last signal into it.
    last_signal: HashMap<(u32, u32), FlowSource>,
}

impl TraceState {
    fn push(&mut self, e: Event) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }
}

pub struct Tracer {
    start: Instant,
    /// `start` as microseconds since the Unix epoch: lines up the traces
    /// of the processes of one launch (`trace --merge`).
    start_unix_us: u64,
    num_devices: u32,
    cores_per_device: u32,
    state: Mutex<TraceState>,
    /// Devices whose program has ended (normally or not).
    finished: Mutex<Vec<bool>>,
}

/// A DMA being traced (`Tracer::dma_begin`).
#[derive(Clone, Copy, Debug)]
pub struct TraceDma {
    issuer: u32,
    id: u64,
}

/// A wait being traced: its start and what it waits for.
#[derive(Clone, Copy, Debug)]
pub struct WaitStart {
    begin: u64,
    site: u32,
}

/// What a traced semaphore wait waits for.
#[derive(Clone, Copy, Debug)]
pub struct WaitOn {
    pub device: u32,
    pub core: u32,
    /// Its name on the timeline: "wait", "wait_no_decrement" or "dma_wait"
    /// (counts bytes).
    pub what: &'static str,
    pub sem: u32,
    pub value: i64,
}

impl Tracer {
    pub fn new(num_devices: u32, cores_per_device: u32) -> Self {
        Tracer {
            start: Instant::now(),
            start_unix_us: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            num_devices,
            cores_per_device,
            state: Mutex::new(TraceState::default()),
            finished: Mutex::new(vec![false; num_devices as usize]),
        }
    }

    /// Nanoseconds since the launch started.
    #[inline]
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn gcore(&self, device: u32, core: u32) -> Option<u32> {
        (device < self.num_devices && core < self.cores_per_device).then(|| device * self.cores_per_device + core)
    }

    // ------------------------------------------------------------- grid

    /// A grid step of (device, core) begins (`begin`) or ends; `indices`
    /// are its grid indices (taken from the begin marker).
    pub fn grid_step(&self, device: u32, core: u32, indices: &[i64], begin: bool) {
        let Some(g) = self.gcore(device, core) else { return };
        let now = self.now();
        let site = site::current();
        let mut st = self.state.lock().ignore_poison();
        // A begin closes a step left open (a missing end marker).
        if let Some(open) = st.steps.remove(&g) {
            st.push(step_span(g, open, now));
        }
        if begin {
            st.steps.insert(g, OpenStep { begin: now, indices: indices.to_vec(), site });
        }
    }

    // ------------------------------------------------------ signals, waits

    /// Core (device, core) signals `sem` on global core `target` by `inc`:
    /// call right before the count changes.
    pub fn signal(&self, device: u32, core: u32, sem: u32, inc: i64, target: u32) {
        let Some(g) = self.gcore(device, core) else { return };
        let ts = self.now();
        let site = site::current();
        let (td, tc) = (target / self.cores_per_device, target % self.cores_per_device);
        let name = if target == g {
            format!("signal sem {sem} +{inc}")
        } else {
            format!("signal sem {sem} +{inc} -> device {td}, core {tc}")
        };
        let args = vec![
            ("sem", TraceArg::Int(sem as i64)),
            ("inc", TraceArg::Int(inc)),
            ("target_device", TraceArg::Int(td as i64)),
            ("target_core", TraceArg::Int(tc as i64)),
        ];
        let mut st = self.state.lock().ignore_poison();
        st.push(Event::Instant { gcore: g, name, cat: "signal", ts, site, args });
        st.last_signal.insert((sem, target), FlowSource::Core { gcore: g, ts });
    }

    /// A wait (or barrier) starts on the calling thread.
    #[inline]
    pub fn wait_begin(&self) -> WaitStart {
        WaitStart { begin: self.now(), site: site::current() }
    }

    /// The wait `on` returned (`error`: the error kind it failed with). A
    /// completed wait gets a flow from the last signal into (sem, core).
    pub fn wait_end(&self, start: WaitStart, on: WaitOn, error: Option<&'static str>) {
        let WaitOn { device, core, what, sem, value } = on;
        let Some(g) = self.gcore(device, core) else { return };
        let end = self.now().max(start.begin);
        let unit = if what == "dma_wait" { " B" } else { "" };
        let mut args = vec![("sem", TraceArg::Int(sem as i64)), ("value", TraceArg::Int(value))];
        if let Some(kind) = error {
            args.push(("error", TraceArg::Str(kind.to_string())));
        }
        let name = format!("{what} sem {sem} >= {value}{unit}");
        let mut st = self.state.lock().ignore_poison();
        st.push(Event::Span {
            track: Track::Core(g),
            name,
            cat: "wait",
            begin: start.begin,
            end,
            site: start.site,
            args,
        });
        if error.is_none() {
            if let Some(from) = st.last_signal.get(&(sem, g)).copied().filter(|f| f.ts() <= end) {
                let id = st.next_flow;
                st.next_flow += 1;
                // Strictly inside the wait when it lasted: the flow end binds
                // to the wait, never to an op starting right as it returns.
                let to_ts = end.saturating_sub(1).max(start.begin).max(from.ts());
                st.push(Event::Flow { id, from, to_gcore: g, to_ts });
            }
        }
    }

    /// The device barrier of `device` returned (recorded on its core 0).
    pub fn barrier_end(&self, start: WaitStart, device: u32, error: Option<&'static str>) {
        let Some(g) = self.gcore(device, 0) else { return };
        let end = self.now().max(start.begin);
        let mut args = Vec::new();
        if let Some(kind) = error {
            args.push(("error", TraceArg::Str(kind.to_string())));
        }
        self.state.lock().ignore_poison().push(Event::Span {
            track: Track::Core(g),
            name: "device barrier".to_string(),
            cat: "barrier",
            begin: start.begin,
            end,
            site: start.site,
            args,
        });
    }

    // ---------------------------------------------------------------- DMAs

    /// A DMA started by (device, core); `what` describes it (both sides,
    /// bytes). Its span ends at [`Tracer::dma_end`].
    pub fn dma_begin(&self, device: u32, core: u32, what: String, args: Vec<(&'static str, TraceArg)>) -> TraceDma {
        let g = self.gcore(device, core).unwrap_or(0);
        let begin = self.now();
        let site = site::current();
        let mut st = self.state.lock().ignore_poison();
        let id = st.next_dma;
        st.next_dma += 1;
        let name = format!("DMA #{id} {what}");
        st.dmas.insert(id, OpenDma { issuer: g, begin, name, site, args });
        TraceDma { issuer: g, id }
    }

    /// DMA `dma` signals `sem` on global core `target` (its send or
    /// receive semaphore): call right before the count changes.
    pub fn dma_signal(&self, dma: TraceDma, sem: u32, target: u32) {
        let ts = self.now();
        let from = FlowSource::Dma { issuer: dma.issuer, id: dma.id, ts };
        self.state.lock().ignore_poison().last_signal.insert((sem, target), from);
    }

    /// DMA `dma` completed (its data has landed): closes its span.
    pub fn dma_end(&self, dma: TraceDma) {
        let end = self.now();
        let mut st = self.state.lock().ignore_poison();
        if let Some(open) = st.dmas.remove(&dma.id) {
            st.push(dma_span(dma.id, open, end, true));
        }
    }

    // -------------------------------------------------------------- export

    /// `device`'s program ended (normally or on an error). True exactly
    /// Devices of other processes (`local[d]` false) have nothing to
    /// record here: they count as finished from the start.
    pub fn elsewhere(&self, local: &[bool]) {
        let mut f = self.finished.lock().ignore_poison();
        for (d, &here) in local.iter().enumerate() {
            if !here {
                if let Some(x) = f.get_mut(d) {
                    *x = true;
                }
            }
        }
    }

    pub fn start_unix_us(&self) -> u64 {
        self.start_unix_us
    }

    /// once: for the call that makes every device finished.
    pub fn device_finished(&self, device: u32) -> bool {
        let mut f = self.finished.lock().ignore_poison();
        let Some(slot) = f.get_mut(device as usize) else { return false };
        if *slot {
            return false;
        }
        *slot = true;
        f.iter().all(|&d| d)
    }

    /// Events recorded so far (open steps and DMAs not included).
    pub fn num_events(&self) -> usize {
        self.state.lock().ignore_poison().events.len()
    }

    /// The timeline so far as Chrome trace-event JSON: steps and DMAs still
    /// open end now (DMAs marked `completed: false`).
    pub fn to_json(&self) -> String {
        let now = self.now();
        let st = self.state.lock().ignore_poison();
        let mut events = st.events.clone();
        let mut open: Vec<_> = st.steps.iter().map(|(&g, s)| (g, s.begin, s.indices.clone(), s.site)).collect();
        open.sort_by_key(|o| o.0);
        for (g, begin, indices, site) in open {
            events.push(step_span(g, OpenStep { begin, indices, site }, now));
        }
        let mut dmas: Vec<_> = st.dmas.iter().collect();
        dmas.sort_by_key(|(id, _)| **id);
        for (&id, d) in dmas {
            let d =
                OpenDma { issuer: d.issuer, begin: d.begin, name: d.name.clone(), site: d.site, args: d.args.clone() };
            events.push(dma_span(id, d, now, false));
        }
        let dropped = st.dropped;
        drop(st);
        let json = export::chrome_json(&events, self.num_devices, self.cores_per_device, dropped, &site::text);
        // When the launch started, so the traces of its processes line up.
        let origin = "\"time_origin\": \"launch start\", ";
        json.replacen(origin, &format!("{origin}\"start_unix_us\": {}, ", self.start_unix_us), 1)
    }
}

fn step_span(gcore: u32, s: OpenStep, end: u64) -> Event {
    let idx: Vec<String> = s.indices.iter().map(|i| i.to_string()).collect();
    Event::Span {
        track: Track::Core(gcore),
        name: format!("step ({})", idx.join(", ")),
        cat: "grid",
        begin: s.begin,
        end: end.max(s.begin),
        site: s.site,
        args: vec![("grid_indices", TraceArg::Ints(s.indices))],
    }
}

fn dma_span(id: u64, d: OpenDma, end: u64, completed: bool) -> Event {
    let mut args = d.args;
    if !completed {
        args.push(("completed", TraceArg::Str("no: never waited for".to_string())));
    }
    Event::Span {
        track: Track::Dma { issuer: d.issuer, id },
        name: d.name,
        cat: "dma",
        begin: d.begin,
        end: end.max(d.begin),
        site: d.site,
        args,
    }
}

// ------------------------------------------------------ runtime hooks
//
// One call each from the runtime and the DMA engine; all are no-ops (one
// branch) when tracing is off.

/// A DMA signals `sem` on global core `gcore` (before the count changes).
#[inline]
pub(crate) fn dma_signal(t: Option<&Tracer>, dma: Option<TraceDma>, sem: u32, gcore: u32) {
    if let (Some(t), Some(d)) = (t, dma) {
        t.dma_signal(d, sem, gcore);
    }
}

/// A DMA completed.
#[inline]
pub(crate) fn dma_end(t: Option<&Tracer>, dma: Option<TraceDma>) {
    if let (Some(t), Some(d)) = (t, dma) {
        t.dma_end(d);
    }
}

/// A core's signal of `sem` on global core `target` (before the count
/// changes).
#[cold]
#[inline(never)]
pub(crate) fn core_signal(t: &Tracer, device: u32, core: u32, sem: u32, inc: i64, target: u32) {
    t.signal(device, core, sem, inc, target);
}

/// Runs `wait` as the traced wait `on`.
#[cold]
#[inline(never)]
pub(crate) fn traced_wait(
    t: &Tracer,
    on: WaitOn,
    wait: impl FnOnce() -> crate::error::Result<()>,
) -> crate::error::Result<()> {
    let start = t.wait_begin();
    let result = wait();
    t.wait_end(start, on, result.as_ref().err().map(|e| e.kind.python_type()));
    result
}

/// Runs `barrier` as a traced device barrier of `device`.
#[cold]
#[inline(never)]
pub(crate) fn traced_barrier(
    t: &Tracer,
    device: u32,
    barrier: impl FnOnce() -> crate::error::Result<()>,
) -> crate::error::Result<()> {
    let start = t.wait_begin();
    let result = barrier();
    t.barrier_end(start, device, result.as_ref().err().map(|e| e.kind.python_type()));
    result
}
