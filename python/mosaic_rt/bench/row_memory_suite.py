"""The "memory over a suite" row: RSS of one process running many distinct
splash attention kernels, stock vs ours (measured by `memory.run_memory`)."""

from __future__ import annotations

from mosaic_rt.bench.row import Row

_COLS = ("side", "start", "after 1st", "end", "growth/kernel", "after clear_caches")


class MemorySuite(Row):
    name, key, devices = "memory over a suite", "memory_suite", 1

    def run(self, budget) -> dict:
        from mosaic_rt.bench import memory

        return memory.run_memory(budget.memory_kernels)

    def summary(self, d) -> str:
        s, o = d["stock"], d["ours"]
        return (
            f"memory over a suite ({d['kernels']} splash kernels fwd+bwd): RSS end stock "
            f"{s['end_mib']:.0f} MiB, ours {o['end_mib']:.0f} MiB; growth per kernel stock "
            f"{s['growth_per_kernel_mib']:.1f} MiB, ours {o['growth_per_kernel_mib']:.1f} MiB"
        )

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.memory import GROWTH_TARGET
        from mosaic_rt.bench.targets import Verdict

        return [
            Verdict(
                "memory growth per kernel",
                GROWTH_TARGET,
                d["growth_ratio"],
                f"ours/stock RSS growth per distinct kernel ({d['ours']['growth_per_kernel_mib']:.1f}"
                f" vs {d['stock']['growth_per_kernel_mib']:.1f} MiB)",
                d["ok"],
                kind="max",
            )
        ]

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table

        t = Table(
            title=f"memory over a suite: RSS of one process running {d['kernels']} distinct "
            f"splash attention kernels (fwd + bwd)"
        )
        for col in _COLS:
            t.add_column(col, justify="left" if col == "side" else "right")
        for side in ("stock", "ours"):
            t.add_row(*_cells(d, side))
        console.print(t)

    def markdown(self, d) -> list[str]:
        lines = [
            "",
            f"Memory over a suite (RSS of one process, {d['kernels']} distinct splash attention kernels fwd + bwd):",
            "",
            "| " + " | ".join(_COLS) + " |",
            "|---|" + "--:|" * (len(_COLS) - 1),
        ]
        return lines + ["| " + " | ".join(_cells(d, side)) + " |" for side in ("stock", "ours")]


def _cells(d, side) -> list[str]:
    x = d[side]
    return [
        side,
        f"{x['start_mib']:.0f} MiB",
        f"{x['first_mib']:.0f} MiB",
        f"{x['end_mib']:.0f} MiB",
        f"{x['growth_per_kernel_mib']:.1f} MiB",
        f"{x['after_clear_mib']:.0f} MiB",
    ]


ROW = MemorySuite()
