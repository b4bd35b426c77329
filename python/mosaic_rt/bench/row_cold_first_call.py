"""The "cold first call" row: a never-seen kernel per family, end to end
(measured by `cold.run_cold`)."""

from __future__ import annotations

from mosaic_rt.bench.fmt import fmt_ratio, fmt_time
from mosaic_rt.bench.row import Row, mismatch_note

TARGET = 5.0  # stock / ours, the sum of the families' medians
FAMILY_TARGET = 3.0  # stock / ours, each family's median


class ColdFirstCall(Row):
    name, key, devices = "cold first call", "cold_first_call", 8

    def run(self, budget) -> dict:
        from mosaic_rt.bench import cold

        return cold.run_cold(budget.cold_reps)

    def summary(self, d) -> str:
        return (
            f"cold first call: stock {fmt_time(d['stock_total_s'])}, ours "
            f"{fmt_time(d['ours_total_s'])}, {fmt_ratio(d['ratio'])}{mismatch_note(d)}"
        )

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.targets import Verdict

        hits = d["persistent_cache_hits"]
        note = f"; {hits} persistent-cache hits: not cold" if hits else ""
        found = [
            Verdict(
                "cold first call",
                TARGET,
                d["ratio"],
                f"sum of per-family medians, stock/ours{note}",
                d["ok"] and not hits and (d["ratio"] or 0) >= TARGET,
            )
        ]
        for f in d["families"]:
            found.append(
                Verdict(
                    f"cold first call {f['family']}",
                    FAMILY_TARGET,
                    f["ratio"],
                    "median stock/ours" + (f" ({f['error']})" if f["error"] else ""),
                    f["ok"] and (f["ratio"] or 0) >= FAMILY_TARGET,
                )
            )
        return found

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table, escape, escaped

        t = Table(
            title=f"cold first call (jit+trace+lower+compile+run of a never-seen "
            f"kernel; median of {d['reps_per_side']} per side)"
        )
        for col in ("family", "stock", "ours", "ratio", "jax floor", "ours/floor", "ok"):
            t.add_column(col, justify="left" if col in ("family", "ok") else "right")
        for f in d["families"]:
            t.add_row(*escaped(_family_cells(f)), "yes" if f["ok"] else f"[bold red]NO[/] {escape(f['error'] or '')}")
        t.add_row(
            "all families (sum)",
            fmt_time(d["stock_total_s"]),
            fmt_time(d["ours_total_s"]),
            fmt_ratio(d["ratio"]),
            "",
            "",
            f"persistent-cache hits: {d['persistent_cache_hits']}",
        )
        console.print(t)

    def markdown(self, d) -> list[str]:
        lines = [
            "",
            f"Cold first call (jit + trace + lower + compile + run of a kernel never "
            f"seen before, fresh shapes each time, persistent cache off; median of "
            f"{d['reps_per_side']} per side):",
            "",
            "| family | stock | ours | ratio | jax floor | ours/floor | ok |",
            "|---|--:|--:|--:|--:|--:|:-:|",
        ]
        for f in d["families"]:
            ok = "yes" if f["ok"] else "NO " + (f["error"] or "")
            lines.append("| " + " | ".join([*_family_cells(f), ok]) + " |")
        lines.append(
            f"| **all (sum of medians)** | {fmt_time(d['stock_total_s'])} | "
            f"{fmt_time(d['ours_total_s'])} | {fmt_ratio(d['ratio'])} | | | "
            f"cache hits: {d['persistent_cache_hits']} |"
        )
        return lines + [
            "",
            "The jax floor is the same math as a plain jax program (the kernel's "
            "loop as a loop, collectives as XLA's own), cold: what jax itself takes "
            "to trace, compile and run it.",
        ]


def _family_cells(f) -> list[str]:
    return [
        f["family"],
        fmt_time(f["stock_median_s"]),
        fmt_time(f["ours_median_s"]),
        fmt_ratio(f["ratio"]),
        fmt_time(f.get("floor_median_s")),
        fmt_ratio(f.get("ours_over_floor")),
    ]


ROW = ColdFirstCall()
