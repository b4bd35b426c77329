"""The "production kernels" row: jax's own Pallas TPU ops, stock / ours /
their plain-jnp reference (measured by `production.run_production`)."""

from __future__ import annotations

from mosaic_rt.bench.fmt import fmt_ratio, fmt_time
from mosaic_rt.bench.row import Row, mismatch_note

# The targets: first call (what a test feels) and steady state, against stock and
# against the op's reference (XLA alone).
FIRST_MEDIAN_TARGET = 5.0  # stock / ours, median over the kernels
FIRST_EACH_TARGET = 3.0  # stock / ours, every kernel
FIRST_REFERENCE_TARGET = 3.0  # ours / reference, every kernel (max)
STEADY_MEDIAN_TARGET = 100.0
STEADY_EACH_TARGET = 10.0

_COLS = (
    "kernel",
    "stock 1st",
    "ours 1st",
    "ref 1st",
    "1st ratio",
    "ours/ref 1st",
    "stock steady",
    "ours steady",
    "ref steady",
    "ratio",
    "ours/ref",
    "ok",
)


class ProductionKernels(Row):
    name, key, devices = "production kernels", "production_kernels", 4

    def run(self, budget) -> dict:
        from mosaic_rt.bench import production

        return production.run_production(budget)

    def summary(self, d) -> str:
        return (
            f"production kernels ({len(d['kernels'])}): first call median "
            f"{fmt_ratio(d['median_first_call_ratio'])} stock, steady median "
            f"{fmt_ratio(d['median_ratio'])}{mismatch_note(d)}"
        )

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.targets import Verdict

        ks = [k for k in d["kernels"] if k.get("ratio")]
        if not ks:
            return []
        ok = d["ok"]

        def worst(key, pick=min):
            k = pick(ks, key=lambda k: k[key])
            return k[key], k["name"]

        first_each, first_name = worst("first_call_ratio")
        ref_first, ref_name = worst("ours_over_reference_first", max)
        steady_each, steady_name = worst("ratio")
        return [
            Verdict(
                "production first call",
                FIRST_MEDIAN_TARGET,
                d["median_first_call_ratio"],
                "median stock/ours over the kernels",
                ok and d["median_first_call_ratio"] >= FIRST_MEDIAN_TARGET,
            ),
            Verdict(
                "production first call, every kernel",
                FIRST_EACH_TARGET,
                first_each,
                f"worst stock/ours ({first_name})",
                ok and first_each >= FIRST_EACH_TARGET,
            ),
            Verdict(
                "production first call vs reference",
                FIRST_REFERENCE_TARGET,
                ref_first,
                f"worst ours/reference ({ref_name})",
                ok and ref_first <= FIRST_REFERENCE_TARGET,
                kind="max",
            ),
            Verdict(
                "production steady",
                STEADY_MEDIAN_TARGET,
                d["median_ratio"],
                "median stock/ours over the kernels",
                ok and d["median_ratio"] >= STEADY_MEDIAN_TARGET,
            ),
            Verdict(
                "production steady, every kernel",
                STEADY_EACH_TARGET,
                steady_each,
                f"worst stock/ours ({steady_name})",
                ok and steady_each >= STEADY_EACH_TARGET,
            ),
        ]

    def render(self, console, d) -> None:
        from mosaic_rt.bench.console import Table, escaped

        t = Table(
            title="production kernels (jax.experimental.pallas.ops.tpu): first call and "
            "steady-state median; ref = the op's plain-jnp reference (XLA alone)"
        )
        for col in _COLS:
            t.add_column(col, justify="left" if col in ("kernel", "ok") else "right")
        for k in d["kernels"]:
            t.add_row(*escaped(_cells(k)))
        console.print(t)
        t = Table(title=_STAGES_TITLE)
        for col in _STAGE_COLS:
            t.add_column(col, justify="left" if col in ("kernel", "side") else "right")
        for row in _stage_rows(d):
            t.add_row(*escaped(row))
        console.print(t)

    def markdown(self, d) -> list[str]:
        lines = [
            "",
            "Production kernels (jax's own Pallas TPU ops; first call = jit + trace + "
            "lower + compile + run; ref = the op's plain-jnp reference, XLA alone):",
            "",
            "| " + " | ".join(_COLS) + " |",
            "|---|" + "--:|" * (len(_COLS) - 2) + ":-:|",
        ]
        lines += ["| " + " | ".join(_cells(k)) + " |" for k in d["kernels"]]
        stage_rows = _stage_rows(d)
        if stage_rows:
            lines += ["", _STAGES_TITLE + ":", "", "| " + " | ".join(_STAGE_COLS) + " |"]
            lines += ["|---|---|" + "--:|" * (len(_STAGE_COLS) - 2)]
            lines += ["| " + " | ".join(row) + " |" for row in stage_rows]
        return lines


_STAGES_TITLE = (
    "production kernels, first call by stage (mosaic_rt.stages): the kernel's jax trace, interpretation, "
    "lowering and XLA compile; other = every other compile; rest = running it and Python"
)
_STAGE_COLS = ("kernel", "side", "first call", "trace", "interpret", "lower", "compile", "other", "rest")


def _stage_rows(d) -> list:
    rows = []
    for k in d["kernels"]:
        for side in ("stock", "ours", "reference"):
            split = (k.get(side) or {}).get("stages")
            if not split:
                continue
            times = [split[s] for s in ("kernel_trace", "kernel_interpret", "kernel_lower", "kernel_compile")]
            if side == "reference":  # no kernel: its own program is "other"
                times = [None] * 4
            rows.append(
                [k["name"] if side == "stock" else "", side, fmt_time(k[side]["first_call_s"])]
                + [fmt_time(t) if t is not None else "-" for t in times]
                + [fmt_time(split["other_compile"]), fmt_time(split["rest"])]
            )
    return rows


def _cells(k) -> list[str]:
    if k["error"]:
        return [k["name"]] + [""] * (len(_COLS) - 2) + [f"NO {k['error']}"]
    s, o, r = k["stock"], k["ours"], k["reference"]
    return [
        k["name"],
        fmt_time(s["first_call_s"]),
        fmt_time(o["first_call_s"]),
        fmt_time(r["first_call_s"]),
        fmt_ratio(k["first_call_ratio"]),
        fmt_ratio(k["ours_over_reference_first"]),
        fmt_time(s["median_s"]),
        fmt_time(o["median_s"]),
        fmt_time(r["median_s"]),
        fmt_ratio(k["ratio"]),
        fmt_ratio(k["ours_over_reference_steady"]),
        "yes" if k["ok"] else "NO",
    ]


ROW = ProductionKernels()
