"""A `perf` profile of the steady state only (no import, trace or compile).

    rm -f /tmp/ctl && mkfifo /tmp/ctl
    perf record -F 4999 -g -D -1 --control fifo:/tmp/ctl -o ours.data -- \\
        env PERF_CTL=/tmp/ctl python steady_profile.py ours reduce-scatter 2000

`perf record -D -1` starts with sampling off; this script turns it on
(writes `enable` to the control fifo named by PERF_CTL) after warm-up
calls, and off after the timed loop. Without PERF_CTL it only times.
WHICH is `ours` or `native` (XLA's own collective), CASE one of `CASES`.
Per call costs of two runs (e.g. ours vs native) then compare directly:
samples / frequency / calls. `perf stat -e context-switches,task-clock`
of two runs with different CALLS gives per-call counts by difference.
"""
import os
import sys
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax  # noqa: E402

from mosaic_rt.bench import collectives, measure  # noqa: E402

CASES = {
    "right-permute": (lambda: collectives.right_permute(8, 128),
                      lambda: collectives.native_right_permute(8)),
    "all-gather": (lambda: collectives.all_gather(8, 16),
                   lambda: collectives.native_all_gather(8)),
    "reduce-scatter": (lambda: collectives.reduce_scatter(8, 16),
                       lambda: collectives.native_reduce_scatter(8, 16)),
}


def _perf(ctl, command):
    if ctl:
        with open(ctl, "w") as fifo:
            fifo.write(command + "\n")


def main(which: str, case: str, calls: int):
    build, native = CASES[case]
    fn, args = build()
    f = fn(measure.interpret_params(False)[1]) if which == "ours" else native()
    for _ in range(50):
        jax.block_until_ready(f(*args))
    ctl = os.environ.get("PERF_CTL")
    _perf(ctl, "enable")
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(f(*args))
    elapsed = time.perf_counter() - start
    _perf(ctl, "disable")
    print(f"{which} {case}: {elapsed / calls * 1e6:.1f} us per call", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2000)
