"""A generative differential fuzzer of Pallas TPU kernels (issue 56): random
valid kernels, run under stock `pltpu.InterpretParams()` and
`mosaic_rt.InterpretParams()`, compared bit for bit (`oracle`), shrunk to a
minimal standalone repro when they differ (`shrink`, `case`).

`runner.run_case(category, seed)` is one case; `categories.NAMES` the
switchable categories. `scripts/fuzz.py` is the long run,
`tests/fuzz/test_fuzz_sample.py` the quick fixed-seed sample."""
