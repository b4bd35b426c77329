"""What the tools in this folder share: the CPU device count (set before jax
starts), the bench's kernels by name, and counts over an optimized HLO module.

Each tool is a script (`python benches/tools/NAME.py --help`); this module is
imported from the script's own folder.
"""

from __future__ import annotations

import collections
import os
import re
import statistics


def use_cpu_devices(n: int = 8) -> None:
    """Asks jax for `n` CPU devices; must run before jax initialises a backend."""
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ.setdefault("JAX_NUM_CPU_DEVICES", str(n))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def bench_case(name: str):
    """The bench case called `name` (`python -m mosaic_rt bench --list`)."""
    from mosaic_rt.bench import suite

    cases = {c.name: c for c in [*suite.suite(False), *suite.suite(True)]}
    if name not in cases:
        raise SystemExit(f"no bench case {name!r}; cases: {', '.join(sorted(cases))}")
    return cases[name]


_FUSION = re.compile(r" fusion\(.*\bkind=k")
_TARGET = re.compile(r'custom_call_target="mosaic_rt_(\w+)"')
_WHILE = re.compile(r" while\(.*\bcondition=")


def program_counts(hlo_text: str) -> dict:
    """What an optimized HLO module is made of, as XLA:CPU compiles it:
    fusions (each becomes LLVM-compiled machine code), our custom calls by
    target, and while loops."""
    targets = collections.Counter(_TARGET.findall(hlo_text))
    return {
        "fusions": len(_FUSION.findall(hlo_text)),
        "custom_calls": dict(targets),
        "whiles": len(_WHILE.findall(hlo_text)),
    }


def fusions(hlo_text: str) -> list[tuple[str, str, str]]:
    """Each fusion of an optimized HLO module: (its computation's name, the
    ops inside it, the jax op names it came from)."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if header:
            current = header.group(1)
            bodies[current] = []
        elif current is not None:
            bodies[current].append(line)
    out = []
    for lines in bodies.values():
        for line in lines:
            call = re.search(r" fusion\(.*\bcalls=%([\w.\-]+)", line)
            if not call:
                continue
            body = bodies.get(call.group(1), [])
            ops = [
                m.group(1)
                for m in (re.search(r"= \S+ ([a-z\-]+)\(", b) for b in body)
                if m and m.group(1) not in ("parameter", "constant", "bitcast")
            ]
            names = re.findall(r'op_name="([^"]+)"', "\n".join([line, *body]))
            short = sorted({n.split("/")[-1] for n in names})
            out.append((call.group(1), ",".join(ops[:8]), " ".join(short[:4])))
    return out


def median_ms(xs) -> float:
    return statistics.median(xs) * 1e3
