"""Number formatting shared by the console, Markdown and report code (no jax import)."""

from __future__ import annotations


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}x"


def fmt_target(v, which: str) -> str:
    """`which` ("target" or "measured") of a verdict (a `targets.Verdict` or its
    JSON dict) as text; "max" and "seconds" targets read "<= ..."."""
    get = v.get if isinstance(v, dict) else lambda k: getattr(v, k)
    value, kind = get(which), get("kind") or "min"
    text = fmt_time(value) if kind == "seconds" else fmt_ratio(value)
    if which == "target" and kind != "min":
        text = "<= " + text
    return text
