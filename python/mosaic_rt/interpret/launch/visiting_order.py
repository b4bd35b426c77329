"""Stock's visiting order of a grid: each "parallel" dimension in a
seeded permutation (`InterpretParams.random_seed`), the others in order.

For a static grid the order is computed once on the host, so the launch
compiles no PRNG kernels for it; it is also what the native grid loop is
given (`static_order`).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from mosaic_rt import jax_internals as jx


def visiting_order(grid, mosaic_params, seed):
    """Per grid dim its visiting order (empty: the identity); numpy arrays
    when the grid is static."""
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    if not any(parallel):
        return (np.zeros((0,), np.int32),) * len(grid)
    # Only the parallel dims' sizes matter (the others' orders are empty),
    # so a grid whose dynamic bounds are all "arbitrary" dims (megablox's
    # gmm) still gets its order on the host.
    if all(isinstance(g, (int, np.integer)) for g, par in zip(grid, parallel) if par):
        host_grid = tuple(int(g) if par else 0 for g, par in zip(grid, parallel))
        try:
            return _grid_coordinates(host_grid, mosaic_params, seed)
        except TypeError:  # unhashable params: no cache, same result
            return _grid_coordinates.__wrapped__(host_grid, mosaic_params, seed)
    return jx.randomized_grid_coordinates(grid, mosaic_params, seed)


def static_order(randomized):
    """The visiting orders as tuples of ints, or None if any is traced."""
    try:
        return tuple(tuple(int(i) for i in np.asarray(c).reshape(-1)) for c in randomized)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None


@functools.lru_cache(maxsize=256)
def _grid_coordinates(grid, mosaic_params, seed):
    """Stock's per-dimension visiting order of a static grid (a seeded
    permutation of each "parallel" dimension), computed once on the host:
    emitted inside the kernel it costs dozens of XLA kernels to compile.
    Computed in numpy (the same threefry bits and stable sort as
    `jax.random.permutation`) where jax's PRNG settings allow; else by jax
    (one eager compile per grid: benches/PERFORMANCE.md, "The launch seam
    and tracing")."""
    parallel = jx.parallel_dim_semantics(mosaic_params, len(grid))
    order = _numpy_grid_coordinates(grid, parallel, seed or 0)
    if order is not None:
        return order
    with jax.ensure_compile_time_eval():  # run now, even while tracing a jit
        coords = jax.jit(lambda: jx.randomized_grid_coordinates(grid, mosaic_params, seed))()
        return tuple(np.asarray(c) for c in coords)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 (20 rounds) hash of uint32 arrays, as jax computes it."""
    u32 = np.uint32
    ks = (u32(k1), u32(k2), u32(k1) ^ u32(k2) ^ u32(0x1BD11BDA))
    x = [np.asarray(x1, u32) + ks[0], np.asarray(x2, u32) + ks[1]]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x[0] = x[0] + x[1]
            x[1] = (x[1] << u32(r)) | (x[1] >> u32(32 - r))
            x[1] = x[0] ^ x[1]
        x[0] = x[0] + ks[(i + 1) % 3]
        x[1] = x[1] + ks[(i + 2) % 3] + u32(i + 1)
    return x


def _threefry_bits(key, n):
    """(bits1, bits2) for counts 0..n-1 (jax's partitionable iota)."""
    count = np.arange(n, dtype=np.uint64)
    return _threefry2x32(
        key[0], key[1], (count >> np.uint64(32)).astype(np.uint32), (count & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    )


def _split(key):
    b1, b2 = _threefry_bits(key, 2)
    return (b1[0], b2[0]), (b1[1], b2[1])


def _numpy_grid_coordinates(grid, parallel, seed):
    """Stock's `_get_randomized_grid_coordinates` in numpy, or None when
    jax's PRNG is configured differently from what this reproduces."""
    try:
        if (
            not jax.config.jax_threefry_partitionable
            or str(jax.config.jax_default_prng_impl) != "threefry2x32"
            or not 0 <= int(seed) < 2**31
        ):
            return None
    except AttributeError:
        return None
    with np.errstate(over="ignore"):
        key = (np.uint32(0), np.uint32(seed))
        out = []
        for size, par in zip(grid, parallel):
            if not par:
                out.append(np.zeros((0,), np.int32))
                continue
            key, sub = _split(key)
            x = np.arange(size, dtype=np.int32)
            rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
            for _ in range(rounds):
                sub, bits_key = _split(sub)
                b1, b2 = _threefry_bits(bits_key, size)
                x = x[np.argsort(b1 ^ b2, kind="stable")]
            out.append(x)
        return tuple(out)
