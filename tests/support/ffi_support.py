"""Helpers shared by the FFI tests (no tests here)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import mosaic_rt.ffi as F
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_uids = itertools.count(1000)


def fresh_uid() -> int:
    """A launch uid no other test uses."""
    return next(_uids)


def mesh_of(n: int):
    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])


def on_devices(n: int, body, *args):
    """Runs ``body(device, *local_args)`` under ``shard_map`` on ``n``
    devices; every array arg and result is split along axis 0, one row
    block per device."""
    mesh = mesh_of(n)

    def per_device(*local):
        return body(jax.lax.axis_index("x"), *local)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    placed = [jax.device_put(jnp.asarray(a), NamedSharding(mesh, P("x"))) for a in args]
    return fn, placed


def run_on_devices(n: int, body, *args):
    fn, placed = on_devices(n, body, *args)
    out = fn(*placed)
    return jax.tree.map(np.asarray, out)


def dummy_rows(n: int):
    """One int32 row per device (shard_map needs an input to split)."""
    return np.zeros((n, 1), np.int32)


def with_token(value, token):
    """``value`` made to depend on ``token`` (keeps the order explicit)."""
    return value + (token * 0).astype(value.dtype)


def begin(device, n, *, uid, **config):
    config.setdefault("wait_timeout", 30)
    return kernel(F.new_token(), device, uid=uid, num_devices=n, **config)


@dataclasses.dataclass
class Launch:
    """A launch being traced: ops update ``token`` in place of threading it."""

    token: Any
    handle: Any
    device: Any


@contextlib.contextmanager
def kernel(token, device, *, uid: int, leak_policy: str | None = None, **config):
    """Emits ``kernel_begin`` ... ``kernel_end`` around the body.

    ``config``: the `mosaic_rt.ffi.LaunchConfig` of the launch (its
    defaults are `mosaic_rt.InterpretParams`'). The body reads and replaces
    ``launch.token``; after the block ``launch.token`` is the token after
    ``kernel_end`` (preceded by a ``leak_report`` if ``leak_policy`` is set)::

        with kernel(F.new_token(), dev, uid=1, num_devices=n) as k:
            k.token = F.semaphore_signal(k.token, k.handle, k.device, 0, sem, 1)
        out = k.token
    """
    # These tests read what a launch reports through Python warnings.
    config.setdefault("python_warnings", True)
    token, handle = F.kernel_begin(token, device, uid=uid, config=F.LaunchConfig(**config))
    launch = Launch(token, handle, device)
    yield launch
    if leak_policy is not None:
        launch.token, _ = F.leak_report(launch.token, handle, device, policy=leak_policy)
    launch.token = F.kernel_end(launch.token, handle, device)
