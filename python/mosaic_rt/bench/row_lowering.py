"""The "lowering and compile" row: trace / interpreter Python / MLIR / XLA
compile / first run, beside a plain jnp program of the same loop (measured
by `lowering.run_lowering`)."""

from __future__ import annotations

from mosaic_rt.bench.fmt import fmt_time
from mosaic_rt.bench.row import Row

PYTHON_TARGET_S = 10e-3  # interpreter Python per kernel
COMPILE_TARGET = 2.0  # ours compile <= 2x a plain jnp program's


class Lowering(Row):
    name, key, devices = "lowering and compile", "lowering", 1

    def run(self, budget) -> dict:
        from mosaic_rt.bench import lowering

        return lowering.run_lowering(budget.lowering_reps)

    def summary(self, d) -> str:
        from mosaic_rt.bench.console import escape

        return "lowering and compile: " + ", ".join(
            f"{escape(k['name'])} ours lower {fmt_time(k['ours']['interp_s'])} compile "
            f"{fmt_time(k['ours']['compile_s'])} (jnp {fmt_time(k['jnp']['compile_s'])})"
            for k in d["kernels"]
        )

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.targets import Verdict

        python = max(d["kernels"], key=lambda k: k["ours"]["interp_s"])
        compile_ = max(d["kernels"], key=lambda k: k["ours_compile_over_jnp"])
        return [
            Verdict(
                "lowering (our Python)",
                PYTHON_TARGET_S,
                python["ours"]["interp_s"],
                f"worst median per kernel ({python['name']})",
                python["ours"]["interp_s"] <= PYTHON_TARGET_S,
                kind="seconds",
            ),
            Verdict(
                "compile vs plain jnp",
                COMPILE_TARGET,
                compile_["ours_compile_over_jnp"],
                f"worst ours/jnp XLA compile ({compile_['name']})",
                compile_["ours_compile_over_jnp"] <= COMPILE_TARGET,
                kind="max",
            ),
        ]

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table, escaped

        t = Table(
            title=f"lowering and compile of one kernel (median of {d['reps']}, fresh "
            "shapes each); kernels = fusions XLA compiles"
        )
        for col in ("kernel", "side", "trace", "interpreter", "MLIR", "XLA compile", "1st run", "kernels"):
            t.add_column(col, justify="left" if col in ("kernel", "side") else "right")
        for cells in _side_cells(d):
            t.add_row(*escaped(cells))
        console.print(t)

    def markdown(self, d) -> list[str]:
        lines = [
            "",
            f"Lowering and compile of one kernel (median of {d['reps']}; "
            "kernels = fusions XLA compiles to machine code):",
            "",
            "| kernel | side | trace | interpreter | MLIR | XLA compile | 1st run | kernels |",
            "|---|---|--:|--:|--:|--:|--:|--:|",
        ]
        return lines + ["| " + " | ".join(cells) + " |" for cells in _side_cells(d)]


def _side_cells(d):
    """One row of cells per kernel and side (stock, ours, jnp)."""
    for k in d["kernels"]:
        for side in ("stock", "ours", "jnp"):
            s = k[side]
            yield [
                k["name"] if side == "stock" else "",
                side,
                fmt_time(s["trace_s"]),
                fmt_time(s["interp_s"]) if side != "jnp" else "-",
                fmt_time(s["mlir_s"]),
                fmt_time(s["compile_s"]),
                fmt_time(s["run_s"]),
                str(s["kernels"]),
            ]


ROW = Lowering()
