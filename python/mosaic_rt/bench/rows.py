"""The bench rows beyond the per-kernel cases: what a kernel author feels.

Each row is one object (`row.Row`) in a module of its own that runs it,
summarises it, judges it (its verdicts) and prints its tables to the
console and as Markdown; this list is the whole of the harness's
knowledge of them. Each row is selected by `--filter` on its name like a
case, measures stock and ours interleaved in one run, and adds its verdicts
to the targets table. Adding a row: a `row_<key>.py` module and its line
here.
"""

from __future__ import annotations

from mosaic_rt.bench import (
    row_cold_first_call,
    row_launch_per_mib,
    row_lowering,
    row_memory_suite,
    row_multi_process,
    row_production_kernels,
    row_suite_workload,
    row_tpu_check,
)

# In the order they run and their verdicts are listed.
ROWS = [
    row_cold_first_call.ROW,
    row_suite_workload.ROW,
    row_launch_per_mib.ROW,
    row_lowering.ROW,
    row_production_kernels.ROW,
    row_memory_suite.ROW,
    row_tpu_check.ROW,
    row_multi_process.ROW,
]

# Rows whose tables print before the others' (where they have always been:
# jax's own ops first).
_TABLES_FIRST = ("production_kernels", "memory_suite", "tpu_check")


def select(filters: list[str]) -> list:
    import re

    if not filters:
        return list(ROWS)
    patterns = [re.compile(f, re.IGNORECASE) for f in filters]
    return [r for r in ROWS if any(p.search(r.name) for p in patterns)]


def verdicts(rows: dict) -> list:
    """Targets (`targets.Verdict`s) of the rows in `rows` (key -> data)."""
    return [v for r in ROWS if r.key in rows for v in r.verdicts(rows[r.key])]


def _in_table_order() -> list:
    return sorted(ROWS, key=lambda r: r.key not in _TABLES_FIRST)


def render(console, rows: dict) -> None:
    for r in _in_table_order():
        if r.key in rows:
            r.render(console, rows[r.key])


def markdown(rows: dict) -> list[str]:
    """The tables of the rows that ran (a row that raised has only its error)."""
    good = {k: d for k, d in rows.items() if "error" not in d}
    return [line for r in _in_table_order() if r.key in good for line in r.markdown(good[r.key])]
