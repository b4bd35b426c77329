"""jax's persistent compilation cache with mosaic_rt kernels, across processes.

A kernel test suite pays XLA compilation for every kernel on every run; with
jax's persistent cache a second run loads the executables instead. Our
programs hold only XLA FFI custom calls (no host callbacks), so they can be
serialized: a second process running the same kernels must hit the cache for
every program and get the same results. (Stock interpret mode's programs are
full of `io_callback`s, which jax never caches.)

Each test starts fresh interpreters on one cache directory, as two pytest
runs of a suite would.
"""

import json
import os
import subprocess
import sys

# Runs the named zoo kernels with mosaic_rt params and prints the cache events
# and the outputs' checksums as JSON (argv: cache dir, comma-separated names).
_RUN = r"""
import json, sys, zlib
import jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
# jax caches only compiles slower than 1 s by default; kernels take ~0.1 s.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
events = {}
jax.monitoring.register_event_listener(
    lambda name, **kw: events.__setitem__(name, events.get(name, 0) + 1))
import numpy as np
from mosaic_rt.bench import zoo
kernels = {k.name: k for k in zoo.kernels(3)}
sums = {}
for name in sys.argv[2].split(","):
    k = kernels[name]
    program, args, expected = k.build()
    out = np.asarray(jax.block_until_ready(program(k.params()[1])(*args)))
    assert np.array_equal(out.reshape(expected.shape), expected), name
    sums[name] = zlib.crc32(out.tobytes())
print(json.dumps({"hits": events.get("/jax/compilation_cache/cache_hits", 0),
                  "misses": events.get("/jax/compilation_cache/cache_misses", 0),
                  "sums": sums}))
"""

# single device (grid, local DMAs, semaphores, races on) and 2 / 4 devices
_KERNELS = [
    "add grid=2",
    "dma-pipeline chunks=2",
    "semaphores iters=4",
    "add grid=4 races",
    "right-permute 2dev",
    "all-gather 4dev",
]


def _run(cache_dir, names):
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="8")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(cache_dir), ",".join(names)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_every_kernel_from_the_cache(tmp_path):
    first = _run(tmp_path, _KERNELS)
    assert first["misses"] >= len(_KERNELS) and first["hits"] == 0
    assert any(tmp_path.iterdir())
    second = _run(tmp_path, _KERNELS)
    assert second["misses"] == 0, second
    assert second["hits"] == first["misses"]
    assert second["sums"] == first["sums"]


def test_cache_hits_do_not_depend_on_which_kernels_ran_before(tmp_path):
    _run(tmp_path, _KERNELS)
    # a later run of part of the suite (pytest -k, another order)
    second = _run(tmp_path, list(reversed(_KERNELS[2:])))
    assert second["misses"] == 0, second
