"""The interpreter: a Pallas TPU kernel, at trace time, as ordinary XLA for
its compute and native ops for its memory, DMAs and semaphores.

Its rooms, lowest first; each may use only the rooms before it (and
anything outside `interpret/`), never a later one
(`tests/api/test_import_layers.py` checks):

- `params` (`mosaic_rt.InterpretParams`) and `context` (`Ctx`, the
  trace-time facts about the core being emitted): the bottom, shared by all.
- `native_compute/`: rank-0 integer/bool equations and elementwise vector
  runs as pure native programs (built here, evaluated by the Rust core).
- `evaluation/`: the kernel jaxpr, equation by equation (`jaxpr_eval`),
  and what it emits: native calls with source sites and logs, regions and
  views of refs, broadcast stores, device ids.
- `launch/`: the seam into jax, interpret mode, and one launch from
  `pallas_call` to `kernel_end`: buffers, the grid loop, several cores.

Nothing is imported here, so importing a room costs only that room.
"""
