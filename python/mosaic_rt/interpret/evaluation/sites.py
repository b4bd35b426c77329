"""Source sites: which kernel line an emitted native op comes from.

Every op the interpreter emits carries the id of its equation's source line
(`file.py:12:4 (kernel)`, the text stock prints) so native reports -- races,
leaks, deadlocks, misuse -- can name the line. Ids come from a process-wide
native table; the equation being emitted is tracked per tracing thread.
"""

from __future__ import annotations

import contextlib
import functools
import threading

from mosaic_rt import _native
from mosaic_rt import jax_internals as jx

_current = threading.local()


@functools.lru_cache(maxsize=4096)
def _intern(text: str) -> int:
    intern = getattr(_native, "intern_site", None)
    return 0 if intern is None else int(intern(text))


def site_id(source_info) -> int:
    """The id of `source_info`'s user line (0 when unknown)."""
    try:
        text = jx.summarize_source(source_info)
    except Exception:  # noqa: BLE001 - a missing line is not an error
        return 0
    return _intern(text) if text and text != "unknown" else 0


@contextlib.contextmanager
def at(source_info):
    """Ops emitted inside carry the site of `source_info` (looked up only
    when an op asks: most equations are plain compute)."""
    prev = getattr(_current, "frame", None)
    _current.frame = [source_info, None]
    try:
        yield
    finally:
        _current.frame = prev


@contextlib.contextmanager
def at_kernel(jaxpr):
    """Ops outside any equation (scratch allocation, block copies, the leak
    check) carry the kernel function's definition line."""
    prev = getattr(_current, "frame", None)
    _current.frame = [None, _kernel_site(jaxpr)]
    try:
        yield
    finally:
        _current.frame = prev


def _kernel_site(jaxpr) -> int:
    info = getattr(getattr(jaxpr, "debug_info", None), "func_src_info", None)
    if not info:
        return 0
    name, sep, where = str(info).rpartition(" at ")  # "kernel at /a/b.py:12"
    return _intern(f"{where} ({name})" if sep else str(info))


def current() -> int:
    """The site of the equation being emitted (0 outside any)."""
    frame = getattr(_current, "frame", None)
    if frame is None:
        return 0
    if frame[1] is None:
        frame[1] = site_id(frame[0])
    return frame[1]
