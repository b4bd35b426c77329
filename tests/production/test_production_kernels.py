"""jax's own production Pallas TPU ops on mosaic_rt: every case of
tests/support/production_cases.py, bit-identical to stock where stock runs it,
equal to the op's reference where it cannot, and deterministic call to call."""

from __future__ import annotations

import jax
import pytest
from production_cases import CASES, Case, assert_bit_identical, assert_close, run

pytestmark = pytest.mark.timeout(120)

# -- the tests ---------------------------------------------------------------------------


def _id(c: Case) -> str:
    return c.name.replace(" ", "-")


def _params():
    for c in CASES:
        marks = [pytest.mark.slow] if c.slow else []
        if c.xfail:
            marks.append(pytest.mark.xfail(reason=c.xfail, strict=False))
        yield pytest.param(c, id=_id(c), marks=marks)


TIMES: dict[str, dict] = {}


@pytest.mark.parametrize("c", list(_params()))
def test_production_kernel(c: Case):
    if jax.device_count() < c.devices:
        pytest.skip(f"needs {c.devices} devices")
    fn, args = c.build()
    for dma in c.dma_modes:
        ours, t_ours = run("ours", fn, args, dma)
        ours2, t_ours2 = run("ours", fn, args, dma)
        times = {"ours_first_s": t_ours, "ours_second_s": t_ours2}
        if c.stock is None:
            stock, t_stock = run("stock", fn, args, dma)
            times["stock_first_s"] = t_stock
            assert_bit_identical(ours, stock)
        elif c.reference is None and c.check is None:
            pytest.fail(f"{c.name}: stock cannot run it and it has no reference")
        if c.check is not None:
            c.check(ours, *args)
        if c.reference is not None and dma == c.dma_modes[0]:
            assert_close(ours, c.reference(*args), c.atol, c.rtol)
        assert_bit_identical(ours2, ours)  # deterministic from call to call
        TIMES[f"{c.name} [{dma}]"] = times
        print(f"\n{c.name} [{dma}]: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()))
