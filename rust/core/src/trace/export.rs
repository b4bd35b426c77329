//! Chrome trace-event JSON (object form: `{"traceEvents": [...], ...}`).
//!
//! Layout: one process (pid) per device, named "device D"; in it one thread
//! (tid = core) per core, named "core C", and the DMAs each core started on
//! "core C DMA lane K" threads (tid = 1000 * (C + 1) + K). DMAs in flight
//! at once go to different lanes, so spans never overlap on a track.
//!
//! Events: complete spans (`"ph": "X"`, `cat` "grid", "wait", "barrier" or
//! "dma") for grid steps, waits, device barriers and DMAs; thread-scoped instants (`"ph": "i"`) for signals; flows
//! (`"ph": "s"` on the signal or DMA, `"ph": "f"` with `"bp": "e"` on the
//! released wait, same `id`) for each completed wait. Timestamps are
//! microseconds (nanosecond precision) from the launch start.
//!
//! Events are written sorted by timestamp (ties: spans and instants first,
//! then flow starts, then flow ends), which is what lets Perfetto bind each
//! flow start to the signal instant it follows and each flow end to its
//! wait; viewers that re-sort see the same order.

use super::{Event, FlowSource, TraceArg, Track};
use std::collections::HashMap;
use std::fmt::Write;

/// Turns a site id into text (`None`: unknown; exported as `site#N`).
type SiteResolver<'a> = dyn Fn(u32) -> Option<String> + 'a;

/// Lanes per core (DMAs in flight at once beyond this share the last lane).
const MAX_LANES: u32 = 999;

fn lane_tid(core: u32, lane: u32) -> u32 {
    1000 * (core + 1) + lane
}

/// Microseconds with nanosecond precision, exactly.
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

pub(crate) fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn args_json(args: &[(&'static str, TraceArg)], site: u32, resolve: &SiteResolver<'_>) -> String {
    let mut s = String::from("{");
    let mut first = true;
    let mut key = |s: &mut String, k: &str| {
        if !first {
            s.push_str(", ");
        }
        first = false;
        escape(k, s);
        s.push_str(": ");
    };
    if site != 0 {
        key(&mut s, "site");
        escape(&resolve(site).unwrap_or_else(|| format!("site#{site}")), &mut s);
    }
    for (k, v) in args {
        key(&mut s, k);
        match v {
            TraceArg::Int(i) => {
                let _ = write!(s, "{i}");
            }
            TraceArg::Str(t) => escape(t, &mut s),
            TraceArg::Ints(xs) => {
                let items: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
                let _ = write!(s, "[{}]", items.join(", "));
            }
        }
    }
    s.push('}');
    s
}

/// Assigns each DMA span a lane of its issuing core: the first lane whose
/// last DMA ended strictly before this one began.
fn dma_lanes(events: &[Event]) -> HashMap<u64, u32> {
    let mut dmas: Vec<(u32, u64, u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Span { track: Track::Dma { issuer, id }, begin, end, .. } => Some((*issuer, *begin, *id, *end)),
            _ => None,
        })
        .collect();
    dmas.sort();
    let mut lanes: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut out = HashMap::new();
    for (issuer, begin, id, end) in dmas {
        let ends = lanes.entry(issuer).or_default();
        let lane = match ends.iter().position(|&e| e < begin) {
            Some(k) => k,
            None if ends.len() < MAX_LANES as usize => {
                ends.push(0);
                ends.len() - 1
            }
            None => ends.len() - 1,
        };
        ends[lane] = end;
        out.insert(id, lane as u32);
    }
    out
}

/// One output record: sort key (ts, kind rank, sequence) and its JSON.
struct Record {
    ts: u64,
    rank: u8,
    seq: usize,
    json: String,
}

pub(crate) fn chrome_json(
    events: &[Event],
    num_devices: u32,
    cores_per_device: u32,
    dropped: u64,
    resolve: &SiteResolver<'_>,
) -> String {
    let lanes = dma_lanes(events);
    let cpd = cores_per_device;
    let place = |track: Track| -> (u32, u32) {
        match track {
            Track::Core(g) => (g / cpd, g % cpd),
            Track::Dma { issuer, id } => (issuer / cpd, lane_tid(issuer % cpd, lanes.get(&id).copied().unwrap_or(0))),
        }
    };
    let mut records = Vec::with_capacity(events.len() + 16);
    let mut used_lanes: Vec<(u32, u32, u32)> = Vec::new();
    for (seq, e) in events.iter().enumerate() {
        match e {
            Event::Span { track, name, cat, begin, end, site, args } => {
                let (pid, tid) = place(*track);
                if let Track::Dma { issuer, id } = track {
                    used_lanes.push((pid, issuer % cpd, lanes.get(id).copied().unwrap_or(0)));
                }
                let mut j = String::from("{\"ph\": \"X\", \"name\": ");
                escape(name, &mut j);
                let _ = write!(
                    j,
                    ", \"cat\": \"{cat}\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"dur\": {}, \"args\": {}}}",
                    micros(*begin),
                    micros(end - begin),
                    args_json(args, *site, resolve)
                );
                records.push(Record { ts: *begin, rank: 1, seq, json: j });
            }
            Event::Instant { gcore, name, cat, ts, site, args } => {
                let (pid, tid) = place(Track::Core(*gcore));
                let mut j = String::from("{\"ph\": \"i\", \"s\": \"t\", \"name\": ");
                escape(name, &mut j);
                let _ = write!(
                    j,
                    ", \"cat\": \"{cat}\", \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}, \"args\": {}}}",
                    micros(*ts),
                    args_json(args, *site, resolve)
                );
                records.push(Record { ts: *ts, rank: 1, seq, json: j });
            }
            Event::Flow { id, from, to_gcore, to_ts } => {
                let (track, from_ts) = match *from {
                    FlowSource::Core { gcore, ts } => (Track::Core(gcore), ts),
                    FlowSource::Dma { issuer, id, ts } => (Track::Dma { issuer, id }, ts),
                };
                let (pid, tid) = place(track);
                let start = format!(
                    "{{\"ph\": \"s\", \"name\": \"release\", \"cat\": \"flow\", \"id\": {id}, \"pid\": {pid}, \
                     \"tid\": {tid}, \"ts\": {}}}",
                    micros(from_ts)
                );
                records.push(Record { ts: from_ts, rank: 2, seq, json: start });
                let (pid, tid) = place(Track::Core(*to_gcore));
                let end = format!(
                    "{{\"ph\": \"f\", \"bp\": \"e\", \"name\": \"release\", \"cat\": \"flow\", \"id\": {id}, \
                     \"pid\": {pid}, \"tid\": {tid}, \"ts\": {}}}",
                    micros(*to_ts)
                );
                records.push(Record { ts: *to_ts, rank: 3, seq, json: end });
            }
        }
    }
    records.sort_by_key(|r| (r.ts, r.rank, r.seq));

    let mut out = String::with_capacity(records.iter().map(|r| r.json.len() + 4).sum::<usize>() + 4096);
    out.push_str("{\"traceEvents\": [\n");
    let mut first = true;
    let mut line = |out: &mut String, s: &str| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
        out.push_str(s);
    };
    for d in 0..num_devices {
        line(&mut out, &format!(
            "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {d}, \"tid\": 0, \"args\": {{\"name\": \"device {d}\"}}}}"
        ));
        line(&mut out, &format!(
            "{{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": {d}, \"tid\": 0, \"args\": {{\"sort_index\": {d}}}}}"
        ));
        for c in 0..cpd {
            line(&mut out, &format!(
                "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {d}, \"tid\": {c}, \"args\": {{\"name\": \"core {c}\"}}}}"
            ));
            line(&mut out, &format!(
                "{{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": {d}, \"tid\": {c}, \"args\": {{\"sort_index\": {}}}}}",
                c * 1000
            ));
        }
    }
    used_lanes.sort();
    used_lanes.dedup();
    for (d, c, k) in used_lanes {
        let tid = lane_tid(c, k);
        line(&mut out, &format!(
            "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {d}, \"tid\": {tid}, \"args\": {{\"name\": \"core {c} DMA lane {k}\"}}}}"
        ));
        line(&mut out, &format!(
            "{{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": {d}, \"tid\": {tid}, \"args\": {{\"sort_index\": {}}}}}",
            c * 1000 + 1 + k
        ));
    }
    for r in &records {
        line(&mut out, &r.json);
    }
    let _ = write!(
        out,
        "\n], \"displayTimeUnit\": \"ns\", \"otherData\": {{\"generator\": \"mosaic_rt\", \"time_origin\": \
         \"launch start\", \"num_devices\": {num_devices}, \"cores_per_device\": {cpd}, \"dropped_events\": {dropped}}}}}\n"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_are_exact() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1234), "1.234");
        assert_eq!(micros(5_000_007), "5000.007");
    }

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        escape("a\"b\\c\nd\u{1}é", &mut s);
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    #[test]
    fn overlapping_dmas_get_different_lanes() {
        let span = |id, begin, end| Event::Span {
            track: Track::Dma { issuer: 0, id },
            name: String::new(),
            cat: "dma",
            begin,
            end,
            site: 0,
            args: vec![],
        };
        // 0: [0, 10], 1: [5, 20] overlaps, 2: [10, 30] starts when 0 ends
        // (not strictly after: a new lane), 3: [11, 12] fits lane 0.
        let lanes = dma_lanes(&[span(0, 0, 10), span(1, 5, 20), span(2, 10, 30), span(3, 11, 12)]);
        assert_eq!([lanes[&0], lanes[&1], lanes[&2], lanes[&3]], [0, 1, 2, 0]);
    }
}
