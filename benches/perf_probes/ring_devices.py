"""The ring collectives against XLA's own at 2, 4 and 8 devices.

`python ring_devices.py [ROUNDS]` prints, per device count, the median
steady-state call of the bench's ring all-gather and reduce-scatter (8 KiB
per device block) next to `lax.all_gather` / `lax.psum_scatter` on the same
data, and their ratio. Every round runs each case once, in an order
rotated per round (see `fixed_cost.py` for why). On a machine with fewer
CPUs than devices, it shows how the gap grows with the device threads
sharing the CPUs: a ring makes n-1 dependent hand-offs between device
threads where XLA's collectives meet once.
"""
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax  # noqa: E402

from mosaic_rt.bench import collectives, measure  # noqa: E402

ROWS = 16
DEVICES = (2, 4, 8)


def _cases():
    _, ours = measure.interpret_params(False)
    cases = {}
    for n in DEVICES:
        fn, args = collectives.all_gather(n, ROWS)
        cases[("all-gather", n, "ours")] = (fn(ours), args)
        cases[("all-gather", n, "native")] = (collectives.native_all_gather(n), args)
        fn, args = collectives.reduce_scatter(n, ROWS)
        cases[("reduce-scatter", n, "ours")] = (fn(ours), args)
        cases[("reduce-scatter", n, "native")] = (collectives.native_reduce_scatter(n, ROWS), args)
    return cases


def main(rounds: int):
    cases = _cases()
    for f, args in cases.values():
        for _ in range(5):
            jax.block_until_ready(f(*args))
    names = list(cases)
    times = {k: [] for k in names}
    for r in range(rounds):
        k0 = (r * 7) % len(names)
        for k in names[k0:] + names[:k0]:
            f, args = cases[k]
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[k].append(time.perf_counter() - start)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"{'case':16s} {'devices':>7s} {'ours us':>9s} {'native us':>9s} {'ratio':>6s}")
    for case in ("all-gather", "reduce-scatter"):
        for n in DEVICES:
            o, x = med[(case, n, "ours")], med[(case, n, "native")]
            print(f"{case:16s} {n:7d} {o:9.1f} {x:9.1f} {o / x:6.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
