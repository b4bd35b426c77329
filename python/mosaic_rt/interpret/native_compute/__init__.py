"""Native compute: runs of a kernel's equations as pure native programs
instead of XLA fusions (XLA:CPU compiles each one with LLVM: see
benches/PERFORMANCE.md, "Native compute instead of XLA fusions").

- `scalar_program`: the wire format of a scalar program and its builder.
- `scalar_items`, `scalar_runs`: which rank-0 integer/bool equations of a
  block become programs, grouped as their data flow allows.
- `vector_runs`: runs of elementwise vector equations as vector programs.

Uses: `mosaic_rt._native`, `mosaic_rt.jax_internals`, `mosaic_rt.ffi.ops`
(to emit a program); nothing else of `interpret/`.
"""
