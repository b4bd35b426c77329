"""The "memory over a suite" row: resident memory of one process running many
distinct production kernels, stock vs ours.

A test suite runs hundreds of distinct kernels in one pytest process; what
each leaves behind (compiled programs, caches, simulated memory, allocator
fragmentation) adds up. Each side runs in a fresh interpreter of its own: a
sequence of distinct splash attention kernels (jax's own, forward and
backward; heads x sequence x head dim x mask, each seen once), reading VmRSS
after each. Reported: RSS at start, after the first kernel, at the
end, the growth per kernel over the run's second half (the steady slope),
and what is left after `jax.clear_caches()` + `malloc_trim` (what the
process holds beyond jax's own caches).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

GROWTH_TARGET = 1.0  # ours' growth per kernel <= stock's

# Runs argv[2] kernels under argv[1] ("stock" / "ours"); prints one JSON line.
_PROGRAM = r"""
import ctypes, gc, json, sys
import jax, jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")

side, count = sys.argv[1], int(sys.argv[2])
if side == "ours":
    import mosaic_rt
    force = lambda: mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams())
else:
    force = lambda: pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())
blocks = sk.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128, block_q_dkv=128,
                       block_kv_dkv=128, block_kv_dkv_compute=128, block_q_dq=128,
                       block_kv_dq=128)
start = rss_mib()
samples = []
for i in range(count):
    # every kernel distinct: heads x sequence x head dim x mask
    heads, seq = 1 + i % 2, 128 * (1 + (i // 2) % 4)
    dim, causal = (64, 128)[(i // 8) % 2], (i // 16) % 2 == 0
    one = sm.CausalMask((seq, seq)) if causal else sm.FullMask((seq, seq))
    kernel = sk.make_splash_mha_single_device(sm.MultiHeadMask([one] * heads),
                                              block_sizes=blocks)
    q, k, v = (jax.random.normal(jax.random.key(n), (heads, seq, dim)) for n in range(3))
    with force():
        out, vjp = jax.vjp(kernel, q, k, v)
        jax.block_until_ready(vjp(out))
    gc.collect()
    samples.append(rss_mib())
jax.clear_caches()
gc.collect()
try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
except OSError:
    pass
print(json.dumps({"start_mib": start, "samples_mib": samples, "after_clear_mib": rss_mib()}))
"""


def _side(side: str, count: int) -> dict:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _PROGRAM, side, str(count)], capture_output=True, text=True, env=env, timeout=3600
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"memory row, {side}: exit {proc.returncode}: " + " | ".join(tail))
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    s = d["samples_mib"]
    half = s[len(s) // 2 :]
    d["first_mib"] = s[0]
    d["end_mib"] = s[-1]
    d["growth_per_kernel_mib"] = (half[-1] - half[0]) / (len(half) - 1) if len(half) > 1 else 0.0
    return d


def run_memory(count: int) -> dict:
    """``count`` distinct kernels (at most 32), per side."""
    count = max(2, min(count, 32))
    out = {"kernels": count}
    for side in ("stock", "ours"):
        out[side] = _side(side, count)
    stock, ours = out["stock"]["growth_per_kernel_mib"], out["ours"]["growth_per_kernel_mib"]
    out["growth_ratio"] = (ours / stock) if stock > 0 else None
    out["ok"] = ours <= max(stock, 0.0) * GROWTH_TARGET or ours <= 1.0
    return out
