"""The differential fuzzer's quick fixed-seed sample (issue 56): a few hundred
generated Pallas TPU kernels, every category, stock `pltpu.InterpretParams()`
vs `mosaic_rt.InterpretParams()` bit for bit (tests/support/fuzzing). A
mismatch fails with its shrunk kernel's standalone repro. The long run is
``scripts/fuzz.py --minutes N --seed S``; every mismatch it finds becomes a
test in test_fuzz_regressions.py.

What the sample accepts (`fuzzing.oracle`): both interpreters agreeing bit
for bit; both rejecting a kernel; stock alone rejecting it or alone wrong
where mosaic_rt gives the kernel's meaning. It fails on mosaic_rt alone
rejecting a kernel, outputs that differ where stock is not shown wrong, a
generator error and a meaning that raises.
"""

from __future__ import annotations

import pytest
from fuzzing import categories, oracle, runner

# Cases per category: generated kernels in all, well inside CI's time on
# both ends of the jax range (multi-device kernels cost the most).
SAMPLE = {
    "elementwise": 60,
    "memory": 32,
    "scalar": 32,
    "grid": 32,
    "dma": 32,
    "multi_device": 12,
    "transforms": 24,
    "pipeline": 16,
}
SEED = 56_000_000  # fixed: the same kernels every run (on one jax version)
BATCH = 8
FAILING = (oracle.MISMATCH, oracle.MEANING_ERROR, "generator_error")


def test_the_sample_covers_every_category():
    assert set(SAMPLE) == set(categories.NAMES)
    assert sum(SAMPLE.values()) >= 200


@pytest.mark.timeout(900)
@pytest.mark.parametrize("category", categories.NAMES)
def test_fuzz_sample(category, tmp_path):
    cases = [(category, SEED + k) for k in range(SAMPLE[category])]
    results = []
    for i in range(0, len(cases), BATCH):
        results += runner.run_batch(cases[i : i + BATCH], repro_dir=str(tmp_path), shrink_budget=40)
    assert len(results) == len(cases)
    failing = [r for r in results if r.kind in FAILING]
    if failing:
        first = failing[0]
        repro = open(first.repro).read() if first.repro else ""
        lines = [f"{r.category}:{r.seed}: {r.kind}: {r.detail}" for r in failing]
        pytest.fail(
            f"{len(failing)} of {len(results)} {category} kernels fail:\n"
            + "\n".join(lines)
            + f"\n\nThe first one, shrunk (python {first.repro}):\n{repro}"
        )
    # A generator whose kernels both interpreters reject tests nothing.
    rejected = sum(r.kind == oracle.BOTH_REJECT for r in results)
    assert rejected <= len(results) // 4, f"{rejected} of {len(results)} {category} kernels are rejected by both"
