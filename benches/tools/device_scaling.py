"""Steady-state cost against XLA's own programs as the device count grows:
a copy-only kernel (the fixed cost of one launch) beside XLA's identity
shard_map, and the bench's ring all-gather / reduce-scatter beside
`lax.all_gather` / `lax.psum_scatter`, at each device count.

    python benches/tools/device_scaling.py [--devices 1,2,4,8] [--rounds N]

Every round calls each case once, in an order rotated per round: the first
launch after a wider one finds cold caches and parked threads, so a fixed
order would charge whichever case comes first. Prints the median per case
and ours / XLA. With fewer CPUs than devices, the device threads share the
CPUs, so the gap grows with the device count: a ring makes n - 1 dependent
hand-offs between device threads where XLA's collectives meet once.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import use_cpu_devices
from steady_loop import ROWS, copy_program


def cases(devices: list[int]) -> dict:
    """(kind, devices) -> {"ours": (fn, args), "xla": (fn, args)}."""
    from mosaic_rt.bench import collectives, measure

    _, ours = measure.interpret_params(False)
    out = {}
    for n in devices:
        fn, args = copy_program(n, ours)
        identity = collectives._shard_map(lambda v: v + 0, collectives._mesh(n))
        out[("copy kernel", n)] = {"ours": (fn, args), "xla": (identity, args)}
        if n < 2:
            continue
        fn, args = collectives.all_gather(n, ROWS)
        out[("all-gather", n)] = {"ours": (fn(ours), args), "xla": (collectives.native_all_gather(n), args)}
        fn, args = collectives.reduce_scatter(n, ROWS)
        out[("reduce-scatter", n)] = {
            "ours": (fn(ours), args),
            "xla": (collectives.native_reduce_scatter(n, ROWS), args),
        }
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1,2,4,8", help="comma-separated device counts")
    parser.add_argument("--rounds", type=int, default=300)
    opts = parser.parse_args(argv)
    devices = [int(d) for d in opts.devices.split(",")]
    use_cpu_devices(max(devices))
    import jax

    table = cases(devices)
    runs = [(key, side, fa) for key, sides in table.items() for side, fa in sides.items()]
    for _, _, (f, args) in runs:
        for _ in range(3):
            jax.block_until_ready(f(*args))
    times = {(key, side): [] for key, side, _ in runs}
    for r in range(opts.rounds):
        k0 = (r * 7) % len(runs)
        for key, side, (f, args) in runs[k0:] + runs[:k0]:
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[(key, side)].append(time.perf_counter() - start)
    print(f"jax {jax.__version__}; {opts.rounds} rotated rounds, median us; {ROWS}x128 f32 blocks")
    print(f"{'case':16s} {'devices':>7s} {'ours':>9s} {'xla':>9s} {'ours/xla':>8s}")
    for kind, n in table:
        ours = statistics.median(times[((kind, n), "ours")]) * 1e6
        xla = statistics.median(times[((kind, n), "xla")]) * 1e6
        print(f"{kind:16s} {n:7d} {ours:9.1f} {xla:9.1f} {ours / xla:8.2f}", flush=True)


if __name__ == "__main__":
    main()
