"""Launch: what drives a kernel launch, from jax's seam to `kernel_end`.

- `seam`: the one hook into jax's pallas_call; `mode`: interpret mode for
  many kernels at once.
- `kernel`: one launch, phase by phase (begin, buffers, grid loop, outputs).
- `buffers` (with `input_writes`: which inputs need no copy), `grid_loop`
  (with `visiting_order`), `cores`: several cores of one device.

Uses: everything below it in `interpret/` (`context`, `params`,
`native_compute`, `evaluation`), `mosaic_rt.ffi`, `mosaic_rt.memory_spaces`,
`mosaic_rt.jax_internals`, `mosaic_rt.tpu_check`.
"""
