"""Evaluation: the kernel jaxpr of one core, equation by equation, as
ordinary JAX for compute and one native op per memory, DMA and semaphore
operation, a token threading them in program order.

- `jaxpr_eval`: the evaluator (one rule per primitive).
- `native_calls`: jaxpr terms -> the `mosaic_rt.ffi.ops` wrappers, with
  source sites (`sites`) and memory logs (`logging_ops`).
- `regions`, `views`: ref transforms -> native regions, and what a region
  cannot express (bitcasts, reshapes) applied to the loaded value.
- `splat`: stores of broadcast scalars as native fills.
- `device_ids`: device-id forms, targets of remote ops, this device's id.

Uses: `interpret.context`, `interpret.params`, `interpret.native_compute`,
`mosaic_rt.ffi`, `mosaic_rt.memory_spaces`, `mosaic_rt.jax_internals`,
`mosaic_rt._native`; never `interpret.launch`.
"""
