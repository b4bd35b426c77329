"""Benchmark suite shipped with the package: stock TPU interpret mode vs mosaic_rt.

Run it with `python -m mosaic_rt bench [--quick] [--filter TEXT] [--json PATH]
[--plot PATH]` or the `mosaic-rt-bench` console script. Kernels live in
`collectives` (multi-device) and `local` (single device); `suite` picks sizes,
`measure` times them, `report` judges and prints the results; the rows beyond
the cases are listed in `rows` (one `row_<key>` module each).

Uses: the public `mosaic_rt` API (as a user would), `mosaic_rt.jax_internals`
(stock's params), `mosaic_rt.tpu_check`.
"""

from mosaic_rt.bench.cli import main

__all__ = ["main"]
