"""The "tpu check" row: what the TPU compile check adds to first calls,
cold, with a warm disk cache and overlapped, in fresh processes (measured
by `tpu_check.run_tpu_check`). No targets: it is a cost report."""

from __future__ import annotations

from mosaic_rt.bench.fmt import fmt_ratio, fmt_time
from mosaic_rt.bench.row import Row

_MODE_TITLES = {
    "off": "no check",
    "cold": "check, cold",
    "warm": "check, warm disk cache",
    "overlap": "check, cold, overlapped",
}
_MODE_COLS = (
    "mode",
    "first calls",
    "vs no check",
    "CPU time",
    "CPU vs no check",
    "whole process",
    "compiles",
    "disk hits",
    "libtpu started",
)


class TpuCheck(Row):
    name, key, devices = "tpu check", "tpu_check", 1

    def run(self, budget) -> dict:
        from mosaic_rt.bench import tpu_check

        return tpu_check.run_tpu_check(budget)

    def summary(self, d) -> str:
        from mosaic_rt.bench.console import escape

        if d.get("skipped"):
            return f"tpu check: skipped, {escape(d['skipped'])}"
        m = d["modes"]
        text = (
            f"tpu check ({d['generation']}, {len(d['kernels'])} kernels' first calls): off "
            f"{fmt_time(m['off']['first_calls_s'])}, cold {fmt_time(m['cold']['first_calls_s'])}"
            f", warm disk cache {fmt_time(m['warm']['first_calls_s'])}"
        )
        if "overlap" in m:
            text += f", overlapped cold {fmt_time(m['overlap']['first_calls_s'])}"
        return text + ("" if d["ok"] else ", [bold red]warm run compiled[/]")

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table, escaped

        if d.get("skipped"):
            console.print(self.summary(d))
            return
        t = Table(
            title=f"tpu check: first calls of {len(d['kernels'])} kernels in a fresh process, "
            f"checked for {d['generation']} (median of {d['reps']})"
        )
        for col in _MODE_COLS:
            t.add_column(col, justify="left" if col == "mode" else "right")
        for cells in _mode_cells(d):
            t.add_row(*cells)
        console.print(t)
        t = Table(
            title="tpu check per kernel: first call per mode; compile = the check's time in the TPU compiler (cold)"
        )
        for col in ("kernel", *d["modes"], "compile"):
            t.add_column(col, justify="left" if col == "kernel" else "right")
        for cells in _kernel_cells(d):
            t.add_row(*escaped(cells))
        console.print(t)

    def markdown(self, d) -> list[str]:
        if d.get("skipped"):
            return ["", f"TPU compile check: skipped, {d['skipped']}."]
        lines = [
            "",
            f"TPU compile check (first calls of {len(d['kernels'])} kernels in a fresh "
            f"process, checked for {d['generation']}; cold: nothing on disk, warm: a second "
            f"process with the disk cache; median of {d['reps']}):",
            "",
            "| " + " | ".join(_MODE_COLS) + " |",
            "|---|" + "--:|" * (len(_MODE_COLS) - 1),
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in _mode_cells(d)]
        cols = ("kernel", *d["modes"], "check compile")
        lines += ["", "| " + " | ".join(cols) + " |", "|---|" + "--:|" * (len(cols) - 1)]
        return lines + ["| " + " | ".join(cells) + " |" for cells in _kernel_cells(d)]


def _mode_cells(d):
    off = d["modes"]["off"]["first_calls_s"]
    cpu_off = d["modes"]["off"]["first_calls_cpu_s"]
    for mode, m in d["modes"].items():
        yield [
            _MODE_TITLES[mode],
            fmt_time(m["first_calls_s"]),
            fmt_ratio(m["first_calls_s"] / off),
            fmt_time(m["first_calls_cpu_s"]),
            fmt_ratio(m["first_calls_cpu_s"] / cpu_off),
            fmt_time(m["process_s"]),
            str(m["compiles"]),
            str(m["disk_hits"]),
            "yes" if m["libtpu_started"] else "no",
        ]


def _kernel_cells(d):
    for k in d["kernels"]:
        yield [k["name"], *(fmt_time(k[f"{m}_first_call_s"]) for m in d["modes"]), fmt_time(k["check_compile_s"])]


ROW = TpuCheck()
