"""Kernel corpora shared by the interpreter parity tests.

A corpus is a list of `Case`s. Each case's `fn(interpret_params, *args)` builds
and runs one `pl.pallas_call(..., interpret=interpret_params)`, so the very same
kernel runs under stock `pltpu.InterpretParams` and `mosaic_rt.InterpretParams`.
Knobs a case needs (e.g. `uninitialized_memory="zero"`) are applied inside
`fn` with `dataclasses.replace`, which keeps the params class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel of a corpus.

    Attributes:
      name: test id.
      fn: ``fn(interpret_params, *args)`` -> pytree of arrays (outputs, plus
        anything recorded while running, e.g. grid points).
      args: deterministic inputs.
      expect_error: if set, running the case must raise and this text must
        appear in the error message (stock wording).
      ours_error: if set, ours must raise with this text in its message
        instead of matching stock's error (for cases where stock's own error
        is unhelpful, e.g. an internal assertion).
      mode_dependent: the result legitimately differs between
        dma_execution_mode "eager" and "on_wait" (e.g. reading a DMA
        destination before waiting).
      reference: optional ``reference(*args)`` -> expected outputs (numpy),
        used to check that stock itself computes the right thing.
      ours_check: for the few documented places where ours deliberately
        differs from stock (e.g. real PRNG bits instead of zeros):
        ``ours_check(outputs)`` asserts what ours must produce instead of
        the bitwise comparison with stock.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    expect_error: str | None = None
    ours_error: str | None = None
    mode_dependent: bool = False
    reference: Callable[..., Any] | None = None
    ours_check: Callable[[Any], None] | None = None
