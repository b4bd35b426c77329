"""Timelines of mosaic_rt kernels.

A launch that traces -- ``InterpretParams(trace_path="trace.json")``, the
``trace_path`` of :func:`mosaic_rt.ffi.kernel_begin`, or
``mosaic_rt.Runtime(trace=True)`` -- records what every simulated core and
DMA did and writes it as Chrome trace-event JSON, which loads in the
Perfetto UI (ui.perfetto.dev) and chrome://tracing:

* one process per device (``device D``); in it one thread per core
  (``core C``) and one per DMA lane of that core (``core C DMA lane K``:
  DMAs in flight at once go to different lanes);
* complete spans (``"ph": "X"``) for grid steps (``step (i, j)``), for every
  semaphore / DMA wait and device barrier, from the call to its return (the
  time the core was blocked, or ran queued DMAs), and for every DMA from its
  start to its completion;
* instants (``"ph": "i"``) for semaphore signals;
* flow arrows (``"ph": "s"`` / ``"ph": "f"``, same ``id``) from the signal or
  DMA completion that last fed a semaphore to each wait it released;
* timestamps in microseconds (nanosecond precision) from the launch start;
  source sites in each event's ``args["site"]``.

File names: the first launch of a process that traces to ``trace.json``
writes ``trace.json``; later ones write ``trace-1.json``, ``trace-2.json``,
... (:func:`trace_files` lists them). The file is written when the launch's
last device finishes, also when the launch failed.

``python -m mosaic_rt trace trace.json --png timeline.png`` draws the same
timeline with matplotlib (``pip install "mosaic_rt[plot]"``); ``--check``
validates the file's structure (:func:`check`).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

__all__ = ["trace_files", "load", "check", "tracks", "summary", "render_png"]


def trace_files() -> list[str]:
    """Trace files written by kernel launches of this process, oldest first."""
    from mosaic_rt import _native

    return list(_native.trace_files())


def load(path: str | os.PathLike) -> dict[str, Any]:
    """A trace file as a dict with ``traceEvents`` (the array form of the
    format is accepted too)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace-event file (no traceEvents list)")
    return data


def merge(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """One timeline of a launch spanning processes from each process's
    trace (`InterpretParams(trace_path=...)` writes one per process, named
    ``trace.p<process>.json``): events shifted onto a common clock (each
    trace's ``start_unix_us``), each device's track named once, flow ids
    kept apart per trace."""
    starts = [t.get("otherData", {}).get("start_unix_us") for t in traces]
    known = [s for s in starts if isinstance(s, (int, float))]
    origin = min(known) if known else 0
    events: list[dict[str, Any]] = []
    seen_meta = set()
    for k, (trace, start) in enumerate(zip(traces, starts)):
        shift = (start - origin) if isinstance(start, (int, float)) else 0
        for e in trace["traceEvents"]:
            e = dict(e)
            if e.get("ph") == "M":
                key = (e.get("pid"), e.get("tid"), e.get("name"), json.dumps(e.get("args"), sort_keys=True))
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            elif "ts" in e:
                e["ts"] = e["ts"] + shift
            if "id" in e and e.get("ph") in ("s", "t", "f"):
                e["id"] = f"{k}:{e['id']}"
            events.append(e)
    other = dict(traces[0].get("otherData", {})) if traces else {}
    other.update(start_unix_us=origin, merged_traces=len(traces))
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _ns(us: float) -> int:
    """Microseconds (as written, nanosecond precision) to integer ns."""
    return round(us * 1000)


def tracks(trace: dict[str, Any]) -> list[tuple[int, int, str]]:
    """(pid, tid, name) of every named track, in display order."""
    names, order = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "M":
            continue
        key = (e.get("pid"), e.get("tid"))
        if e.get("name") == "thread_name":
            names[key] = e["args"]["name"]
        elif e.get("name") == "thread_sort_index":
            order[key] = e["args"]["sort_index"]
    return sorted(((p, t, n) for (p, t), n in names.items()), key=lambda x: (x[0], order.get((x[0], x[1]), x[1])))


def check(trace: dict[str, Any]) -> list[str]:
    """Structural problems of a mosaic_rt trace (empty when it is sound):
    one track per (device, core); spans nest on every track; timestamps
    never go back on a track; every flow has one start and one end, the end
    not before the start, each bound to an event of its track."""
    problems: list[str] = []
    events = trace["traceEvents"]
    other = trace.get("otherData", {})
    by_track: dict[tuple, list[dict]] = defaultdict(list)
    for i, e in enumerate(events):
        ph = e.get("ph")
        if ph not in ("M", "X", "i", "s", "f"):
            problems.append(f"event {i}: unexpected phase {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problems.append(f"event {i}: pid/tid missing")
            continue
        if ph == "M":
            continue
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            problems.append(f"event {i}: bad ts {e.get('ts')!r}")
            continue
        if ph == "X" and (not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0):
            problems.append(f"event {i}: bad dur {e.get('dur')!r}")
            continue
        by_track[(e["pid"], e["tid"])].append(e)

    # One named track per (device, core), and every event on a named track.
    named = {(p, t): n for p, t, n in tracks(trace)}
    devices, cores = other.get("num_devices"), other.get("cores_per_device")
    if devices is not None and cores is not None:
        want = {(d, c) for d in range(devices) for c in range(cores)}
        have = {k for k, n in named.items() if n.startswith("core ") and "DMA" not in n}
        if have != want:
            problems.append(f"core tracks {sorted(have)} != (device, core) pairs {sorted(want)}")
    for key in by_track:
        if key not in named:
            problems.append(f"events on unnamed track {key}")

    for key, evs in by_track.items():
        last = -1
        for e in evs:  # file order
            if _ns(e["ts"]) < last:
                problems.append(f"track {key}: timestamp {e['ts']} after {last / 1000}")
            last = max(last, _ns(e["ts"]))
        spans = sorted((_ns(e["ts"]), -_ns(e["dur"]), e["name"]) for e in evs if e["ph"] == "X")
        stack: list[tuple[int, int, str]] = []
        for begin, neg, name in spans:
            end = begin - neg
            while stack and stack[-1][1] <= begin:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(
                    f"track {key}: span {name!r} [{begin}, {end}] ns overlaps "
                    f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}] ns"
                )
            stack.append((begin, end, name))

    starts, ends = {}, {}
    for e in events:
        if e.get("ph") == "s":
            if e.get("id") in starts:
                problems.append(f"flow {e.get('id')} starts twice")
            starts[e.get("id")] = e
        elif e.get("ph") == "f":
            if e.get("id") in ends:
                problems.append(f"flow {e.get('id')} ends twice")
            ends[e.get("id")] = e
    for fid in starts.keys() ^ ends.keys():
        problems.append(f"flow {fid} has only one end")
    for fid in starts.keys() & ends.keys():
        s, f = starts[fid], ends[fid]
        if _ns(f["ts"]) < _ns(s["ts"]):
            problems.append(f"flow {fid} ends ({f['ts']}) before it starts ({s['ts']})")
        for end, kinds in ((s, ("i", "X")), (f, ("X",))):
            t = _ns(end["ts"])
            bound = any(
                e["ph"] in kinds
                and (_ns(e["ts"]) == t if e["ph"] == "i" else _ns(e["ts"]) <= t <= _ns(e["ts"]) + _ns(e["dur"]))
                for e in by_track.get((end["pid"], end["tid"]), ())
            )
            if not bound:
                problems.append(
                    f"flow {fid}: its {end['ph']!r} end at {end['ts']} on track "
                    f"{(end['pid'], end['tid'])} has no event to bind to"
                )
    return problems


def summary(trace: dict[str, Any]) -> str:
    """One line: tracks, spans by category, signals, flows, time span."""
    events = trace["traceEvents"]
    cats: dict[str, int] = defaultdict(int)
    signals = flows = 0
    end = 0.0
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            cats[e.get("cat", "?")] += 1
            end = max(end, e["ts"] + e["dur"])
        elif ph == "i":
            signals += 1
            end = max(end, e["ts"])
        elif ph == "s":
            flows += 1
    spans = ", ".join(f"{n} {c}" for c, n in sorted(cats.items()))
    dropped = trace.get("otherData", {}).get("dropped_events", 0)
    tail = f"; {dropped} events dropped" if dropped else ""
    return (
        f"{len(tracks(trace))} tracks; spans: {spans or 'none'}; {signals} signals; {flows} flows; {end:.1f} us{tail}"
    )


# Colours per span category (and for waits that failed).
_COLOURS = {"grid": "#9ecae1", "wait": "#fd8d3c", "barrier": "#fdd0a2", "dma": "#74c476", "error": "#d62728"}
_LABELS = {"grid": "grid step", "wait": "blocked in a wait", "barrier": "device barrier", "dma": "DMA in flight"}


def render_png(
    trace: dict[str, Any], png: str | os.PathLike, *, title: str | None = None, max_flows: int = 2000
) -> None:
    """Draws the timeline: one row per track, bars for spans (grid steps
    behind, waits in front), markers for signals, arrows for flows.
    Needs matplotlib (``pip install "mosaic_rt[plot]"``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = tracks(trace)
    row_of = {(p, t): i for i, (p, t, _) in enumerate(rows)}
    labels = [f"device {p} / {n}" for p, t, n in rows]
    events = [e for e in trace["traceEvents"] if (e.get("pid"), e.get("tid")) in row_of]

    # Nesting depth of each span on its track (steps 0, waits 1, ...).
    bars: dict[tuple[str, int], list[tuple[int, float, float]]] = defaultdict(list)
    per_track: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            per_track[row_of[(e["pid"], e["tid"])]].append(e)
    max_depth = 0
    for row, spans in per_track.items():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for e in spans:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            depth = len(stack)
            max_depth = max(max_depth, depth)
            stack.append(e["ts"] + e["dur"])
            cat = "error" if "error" in e.get("args", {}) else e.get("cat", "grid")
            bars[(cat, depth)].append((row, e["ts"], max(e["dur"], 0.0)))

    end = max([e["ts"] + e.get("dur", 0) for e in events if e["ph"] in ("X", "i")] or [1.0])
    height = max(2.8, 0.55 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(14, height), dpi=110)
    min_w = end / 1500  # every span at least ~1 px wide
    for (cat, depth), items in sorted(bars.items(), key=lambda kv: kv[0][1]):
        h = 0.8 * (0.72**depth)
        by_row: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for row, ts, dur in items:
            by_row[row].append((ts, max(dur, min_w)))
        for row, xranges in by_row.items():  # one collection per row: fast for big traces
            ax.broken_barh(
                xranges,
                (row - h / 2, h),
                facecolors=_COLOURS.get(cat, "#bbbbbb"),
                edgecolors="#555555" if depth == 0 else "none",
                linewidth=0.3,
                zorder=1 + depth,
            )

    sig_x = [e["ts"] for e in events if e["ph"] == "i"]
    sig_y = [row_of[(e["pid"], e["tid"])] - 0.42 for e in events if e["ph"] == "i"]
    ax.scatter(sig_x, sig_y, marker="v", s=22, color="#6a3d9a", zorder=10, linewidths=0)

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    drawn = 0
    for e in events:
        if e["ph"] != "f" or e["id"] not in starts or drawn >= max_flows:
            continue
        s = starts[e["id"]]
        y0, y1 = row_of[(s["pid"], s["tid"])], row_of[(e["pid"], e["tid"])]
        ax.annotate(
            "",
            xy=(e["ts"], y1),
            xytext=(s["ts"], y0),
            arrowprops=dict(
                arrowstyle="-|>", color="#444444", lw=0.7, alpha=0.7, shrinkA=0, shrinkB=0, mutation_scale=8
            ),
            zorder=9,
        )
        drawn += 1

    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, end * 1.01)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlabel("time since launch start (µs)")
    ax.set_ylabel("track (device / core or DMA lane)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6, zorder=0)
    for i in range(len(rows)):
        ax.axhline(i + 0.5, color="#eeeeee", linewidth=0.6, zorder=0)
    handles = [
        Patch(facecolor=_COLOURS[c], edgecolor="#555555", label=_LABELS[c])
        for c in ("grid", "wait", "barrier", "dma")
        if any(k[0] == c for k in bars)
    ]
    if any(k[0] == "error" for k in bars):
        handles.append(Patch(facecolor=_COLOURS["error"], label="wait that failed"))
    if sig_x:
        handles.append(Line2D([], [], marker="v", color="#6a3d9a", linestyle="none", label="semaphore signal"))
    if drawn:
        handles.append(Line2D([], [], color="#444444", marker=">", label="signal -> wait released"))
    if handles:
        ax.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.12 - 0.25 / height),
            ncol=len(handles),
            fontsize=8,
            frameon=False,
        )
    ax.set_title(title or "mosaic_rt timeline: " + summary(trace), fontsize=10)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
