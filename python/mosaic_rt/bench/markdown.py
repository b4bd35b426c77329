"""Markdown tables from a `--json` results file (for benches/RESULTS.md).

`python -m mosaic_rt.bench.markdown results.json` prints them; the harness
writes the same with `--markdown PATH`.
"""

from __future__ import annotations

import json
import sys


def _t(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:,.1f}x"


def render(data: dict) -> str:
    env = data["environment"]
    lines = [
        f"Run {env['timestamp_utc']}, commit `{env['commit']}`, command "
        f"`python -m mosaic_rt bench {' '.join(data['settings'].get('argv', []))}`.",
        "",
        f"Machine: {env['processor']} ({env['machine']}), {env['cpu_count']} CPUs "
        f"({env.get('cpus_usable')} usable), {env['platform']}; Python {env['python']}, "
        f"jax {env['jax']}, jaxlib {env['jaxlib']}, numpy {env['numpy']}, "
        f"{env['jax_devices']} simulated CPU devices; load average at the end "
        f"(1/5/15 min): {', '.join(f'{x:.1f}' for x in env.get('loadavg_1_5_15min') or [])}.",
        "",
        "| case | dev | 1st call stock | 1st call ours | stock median [min] | ours median [min] "
        "| ratio | per op stock | per op ours | op | reps | XLA native [min] | ours/native "
        "| equal |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|:-:|",
    ]
    for c in data["cases"]:
        s, o = c["stock"], c["ours"]
        if c["error"] or not (s and o):
            lines.append(f"| {c['name']} | {c['devices']} | | | | | | | | | | | | ERROR: {c['error']} |")
            continue
        per_op = ["-", "-", ""] if c["unit"] == "call" else [_t(c["per_op_stock_s"]), _t(c["per_op_ours_s"]), c["unit"]]
        equal = "yes" if c["ok"] else ("MISMATCH" if not c["equal"] else "WRONG")
        n = c.get("native")
        native = f"{_t(n['median_s'])} [{_t(n['min_s'])}]" if n else "-"
        lines.append(
            f"| {c['name']} | {c['devices']} | {_t(s['first_call_s'])} | {_t(o['first_call_s'])} "
            f"| {_t(s['median_s'])} [{_t(s['min_s'])}] | {_t(o['median_s'])} [{_t(o['min_s'])}] "
            f"| {_x(c['ratio'])} | {' | '.join(per_op)} | {s['reps']}/{o['reps']} "
            f"| {native} | {_x(c.get('ours_over_native'))} | {equal} |"
        )
    lines += [
        "",
        "Marginal cost per operation (least-squares slope over each sweep):",
        "",
        "| family | stock | ours | ratio |",
        "|---|--:|--:|--:|",
    ]
    for name, f in data["families"].items():
        if f["marginal_ratio"] is not None:
            lines.append(
                f"| {name} | {_t(f['stock_marginal_s'])} | {_t(f['ours_marginal_s'])} | {_x(f['marginal_ratio'])} |"
            )
    from mosaic_rt.bench.fmt import fmt_target
    from mosaic_rt.bench.rows import markdown as rows_markdown

    lines += rows_markdown(data.get("rows") or {})
    lines += ["", "Targets:", "", "| target | needed | measured | judged by | result |", "|---|--:|--:|---|---|"]
    for v in data["targets"]:
        lines.append(
            f"| {v['subject']} | {fmt_target(v, 'target')} | "
            f"{fmt_target(v, 'measured')} | {v['how']} "
            f"| {'PASS' if v['passed'] else 'FAIL'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m mosaic_rt.bench.markdown RESULTS.json")
    with open(sys.argv[1]) as f:
        sys.stdout.write(render(json.load(f)))
