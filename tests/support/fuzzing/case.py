"""A generated kernel as standalone Python source.

Every generator makes a *spec* (a frozen dataclass of its category) that
renders itself as source text defining

* ``KNOBS``: `InterpretParams` fields both interpreters get (the DMA mode,
  ``out_of_bounds_reads``, ...), and ``OURS_KNOBS``: mosaic_rt's own on top
  (``dma_execution_mode="tpu"``, which stock lacks);
* ``ARGS``: the inputs (numpy arrays, made by `make_input` from seeds);
* ``run(params)``: builds and runs the kernel under ``params``; returns its
  outputs (a list of arrays);
* ``meaning()``: the same computation without any interpreter (numpy, or
  eager jax op by op: the TPU's wrapping integers and per-op float
  rounding), or None where the generator has no model of it;
* ``compiled_meaning()`` (where a category has one): the meaning's program
  under `jax.jit`, which XLA rewrites as it rewrites stock's and ours (the
  oracle's second opinion where stock rejects a kernel).

The fuzzer runs exactly that text (`load`), and a mismatch's repro file is
that text plus a ``__main__`` harness comparing stock with mosaic_rt: what
runs in the fuzzer is what the repro runs.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import textwrap

from fuzzing import data, fakes

_HEADER = '''\
"""mosaic_rt fuzz case: {title}.

Run it: python {{this file}} -- compares stock `pltpu.InterpretParams()` with
`mosaic_rt.InterpretParams()` bit for bit (and both with the kernel's meaning).
"""

import os

if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count={devices}"
    ).strip()

import functools  # noqa: F401
import math  # noqa: F401

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding  # noqa: F401
from jax.sharding import PartitionSpec as P  # noqa: F401

'''

_HARNESS = """

def _repro_bits(x):
    x = np.asarray(x)
    return x.dtype.str, x.shape, x.tobytes()


def _main():
    import mosaic_rt

    def attempt(f):
        try:
            return [np.asarray(x) for x in jax.tree.leaves(jax.block_until_ready(f()))]
        except Exception as exc:  # noqa: BLE001 - the exception is the result
            return exc

    stock = attempt(lambda: run(pltpu.InterpretParams(**KNOBS)))
    if isinstance(stock, Exception):
        pltpu.reset_tpu_interpret_mode_state()
    ours = attempt(lambda: run(mosaic_rt.InterpretParams(**{**KNOBS, **OURS_KNOBS})))
    want = meaning()
    for name, got in (("stock", stock), ("mosaic_rt", ours)):
        if isinstance(got, Exception):
            print(f"{name}: {type(got).__name__}: {str(got)[:2000]}")
        else:
            print(f"{name}: {[(str(x.dtype), x.shape) for x in got]}")
    if not isinstance(stock, Exception) and not isinstance(ours, Exception):
        same = [_repro_bits(a) == _repro_bits(b) for a, b in zip(stock, ours)]
        print("bit-identical outputs:", same)
        for k, ok in enumerate(same):
            if not ok:
                bad = np.nonzero(stock[k].reshape(-1).view(np.uint8) != ours[k].reshape(-1).view(np.uint8))[0]
                at = np.unravel_index(bad[0] // stock[k].dtype.itemsize, stock[k].shape)
                print(f"  output {k}: first difference at {tuple(int(i) for i in at)}: "
                      f"stock {stock[k][at]!r}, mosaic_rt {ours[k][at]!r}"
                      + ("" if want is None else f", meaning {np.asarray(want[k])[at]!r}"))


if __name__ == "__main__":
    _main()
"""


def _data_source() -> str:
    return textwrap.dedent(inspect.getsource(data.make_input))


def _fakes_source() -> str:
    """`fakes` without its docstring (its first statement)."""
    text = inspect.getsource(fakes)
    return text[text.index('"""', 3) + 3 :].strip("\n")


def source(spec, *, title: str) -> str:
    """The standalone source of ``spec`` (see the module doc)."""
    head = _HEADER.format(title=title, devices=max(16, spec.devices()))
    body = spec.render().strip("\n")
    helpers = _data_source()
    if getattr(spec, "uses_fakes", lambda: False)():
        helpers += f"\n\n# The kernel's meaning: its own code over numpy refs.\n{_fakes_source()}\n"
    ours = getattr(spec, "our_knobs", dict)()
    knobs = (
        f"KNOBS = {spec.knobs()!r}\n# mosaic_rt's own fields (stock has no such field or value)\nOURS_KNOBS = {ours!r}"
    )
    return f"{head}{helpers}\n\n{knobs}\n\n{body}\n{_HARNESS}"


_counter = itertools.count()


def load(text: str, name: str) -> dict:
    """Executes a case's source; returns its namespace (``run``, ``ARGS``,
    ``meaning``, ``KNOBS``). The text is registered with linecache, so
    tracebacks and kernel source sites show its lines."""
    filename = f"<fuzz {name} #{next(_counter)}>"
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    ns: dict = {"__name__": "fuzz_case", "__file__": filename}
    exec(compile(text, filename, "exec"), ns)
    return ns


def forget(ns: dict) -> None:
    """Drops a loaded case's lines from linecache (long runs load thousands)."""
    linecache.cache.pop(ns.get("__file__"), None)
