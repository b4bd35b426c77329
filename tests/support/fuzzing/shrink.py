"""Greedy shrinking of a failing spec: take the first smaller spec
(`spec.shrinks()`, most aggressive first) that still fails the same way,
and start over from it, until none does or the budget of runs is spent."""

from __future__ import annotations


def shrink(spec, still_fails, budget: int = 120):
    """``(smallest failing spec found, runs spent)``."""
    runs = 0
    progress = True
    while progress and runs < budget:
        progress = False
        for candidate in spec.shrinks():
            if runs >= budget:
                break
            runs += 1
            if still_fails(candidate):
                spec, progress = candidate, True
                break
    return spec, runs
