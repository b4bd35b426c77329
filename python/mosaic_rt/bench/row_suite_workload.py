"""The "suite workload" row: the 44 distinct small kernels of `zoo`, each
run once per pass (measured by `cold.run_suite`)."""

from __future__ import annotations

from mosaic_rt.bench.fmt import fmt_ratio, fmt_time
from mosaic_rt.bench.row import Row, mismatch_note

TARGET = 3.0  # stock / ours, the totals


class SuiteWorkload(Row):
    name, key, devices = "suite workload", "suite_workload", 8

    def run(self, budget) -> dict:
        from mosaic_rt.bench import cold

        return cold.run_suite(budget.suite_passes)

    def summary(self, d) -> str:
        return (
            f"suite workload ({d['distinct_kernels']} kernels): stock "
            f"{fmt_time(d['stock_total_s'])}, ours {fmt_time(d['ours_total_s'])}, "
            f"{fmt_ratio(d['ratio'])}{mismatch_note(d)}"
        )

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.targets import Verdict

        return [
            Verdict(
                "suite workload",
                TARGET,
                d["ratio"],
                f"total stock/ours, {d['distinct_kernels']} kernels x {len(d['passes'])} pass(es)",
                d["ok"] and not d["persistent_cache_hits"] and (d["ratio"] or 0) >= TARGET,
            )
        ]

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table, escape, escaped

        t = Table(
            title=f"suite workload: {d['distinct_kernels']} distinct kernels, each called "
            "once per pass (end to end, totals)"
        )
        for col in ("family", "kernels", "stock", "ours", "ratio"):
            t.add_column(col, justify="left" if col == "family" else "right")
        for name, f in d["families"].items():
            cells = [name, str(f["kernels"]), fmt_time(f["stock_s"]), fmt_time(f["ours_s"]), fmt_ratio(f["ratio"])]
            t.add_row(*escaped(cells))
        for p in d["passes"]:
            t.add_row(f"pass {p['pass'] + 1} (all)", "", *_pass_cells(p))
        console.print(t)
        for k in d["kernels"]:
            if not k["ok"]:
                why = k["error"] or ("outputs differ" if not k["equal"] else "wrong result")
                console.print(f"[bold red]suite kernel {escape(k['name'])} (pass {k['pass'] + 1}):[/] {escape(why)}")

    def markdown(self, d) -> list[str]:
        lines = [
            "",
            f"Suite workload ({d['distinct_kernels']} distinct kernels, each called once per pass, end to end):",
            "",
            "| family | kernels | stock | ours | ratio |",
            "|---|--:|--:|--:|--:|",
        ]
        for name, f in d["families"].items():
            lines.append(
                f"| {name} | {f['kernels']} | {fmt_time(f['stock_s'])} | "
                f"{fmt_time(f['ours_s'])} | {fmt_ratio(f['ratio'])} |"
            )
        for p in d["passes"]:
            lines.append(f"| **pass {p['pass'] + 1}** | | " + " | ".join(_pass_cells(p)) + " |")
        return lines


def _pass_cells(p) -> list[str]:
    return [fmt_time(p["stock_s"]), fmt_time(p["ours_s"]), fmt_ratio(p["ratio"])]


ROW = SuiteWorkload()
