"""A bench target's verdict: what was needed, what was measured, how it was
judged. At the bottom of the bench package: rows, families and the report
all build these, and this module imports none of them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Verdict:
    subject: str  # family or row name, or case name for race cases
    target: float
    measured: float | None
    how: str
    passed: bool
    # "min": a speed-up, measured >= target; "max": a ratio that must stay
    # <= target (e.g. ours / XLA native); "seconds": a time <= target.
    kind: str = "min"
