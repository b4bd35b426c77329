"""Input data of a fuzz case, from a seed.

The function below is copied verbatim into every case's source (see
`fuzzing.case`), so a repro file makes the same inputs without this package.
It must therefore stay self-contained: numpy and ml_dtypes only.
"""

from __future__ import annotations


def make_input(seed, shape, dtype, special=True):
    """An array of ``shape`` and ``dtype`` drawn from ``seed``: small values
    mostly (exact everywhere), with the edges of the type mixed in when
    ``special``: NaN, +-inf, -0.0, subnormals and the largest values for
    floats; the minimum, maximum, 0 and -1 for integers."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind == "f" or dt in (np.dtype(ml_dtypes.bfloat16),):
        x = rng.integers(-8, 9, size=n).astype(np.float32) * np.float32(rng.choice([0.25, 0.5, 1.0, 3.0]))
        x = x + rng.standard_normal(n).astype(np.float32) * np.float32(rng.integers(0, 2))
        if special and n:
            info = ml_dtypes.finfo(dt)
            edges = np.asarray(
                [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, float(info.max), -float(info.max), float(info.tiny)]
                + [float(info.smallest_subnormal)],
                np.float32,
            )
            pick = rng.random(n) < 0.15
            x[pick] = rng.choice(edges, size=int(pick.sum()))
        return x.astype(dt).reshape(shape)
    info = ml_dtypes.iinfo(dt)
    lo, hi = int(info.min), int(info.max)
    x = rng.integers(max(lo, -20), min(hi, 20) + 1, size=n, dtype=np.int64)
    if special and n:
        wide = rng.random(n) < 0.2
        x[wide] = rng.integers(lo, hi + 1, size=int(wide.sum()), dtype=np.int64)
        edges = np.asarray([lo, hi, 0, -1 if lo < 0 else 1, lo + 1 if lo < 0 else hi - 1], np.int64)
        pick = rng.random(n) < 0.1
        x[pick] = rng.choice(edges, size=int(pick.sum()))
    return x.astype(dt).reshape(shape)
